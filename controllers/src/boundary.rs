//! A panic is a bug, never an outage. Every reconcile (of either controller) and every background
//! job runs inside [`contain`], which turns a panic into an ordinary failure of that one piece of
//! work: the caller reports it (reason `InternalError`, a Warning Event, the
//! `capi_lb_panics_total` metric) and backs off for that object alone, while every other object
//! goes on being reconciled. Without it, one tenant's object that reaches a panic (a library's
//! arithmetic on a value a tenant's server chose, say) ended the process, on every restart again:
//! a crash loop for every tenant of the cluster.
//!
//! The panic's own text is kept short ([`MESSAGE_MAX`]): it may quote what a tenant wrote.

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;

use futures::FutureExt;

/// The most of a panic's message kept, in bytes.
pub const MESSAGE_MAX: usize = 256;

/// A panic caught at a boundary, with (the start of) its message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Panicked(pub String);

impl std::fmt::Display for Panicked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "panicked: {}", self.0)
    }
}

/// Run `future` to its end; a panic inside it becomes `Err(Panicked)`.
///
/// The future is dropped where it panicked: whatever it held (a work slot, a lock guard of
/// tokio's, a timer) is released as on any early return. State shared through `std` mutexes is
/// read poison-tolerantly everywhere in capi-lb, so a panic never poisons another object's work.
pub async fn contain<F: Future>(future: F) -> Result<F::Output, Panicked> {
    AssertUnwindSafe(future)
        .catch_unwind()
        .await
        .map_err(|payload| Panicked(message(payload.as_ref())))
}

/// What a panic said (its `&str` or `String` payload), cut at [`MESSAGE_MAX`] bytes.
fn message(payload: &(dyn Any + Send)) -> String {
    let text = payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_string());
    truncate(&text, MESSAGE_MAX)
}

/// `text` cut to at most `max` bytes on a character boundary, with `…` when cut.
pub fn truncate(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

#[cfg(test)]
#[allow(clippy::panic, clippy::unwrap_used)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_panic_becomes_an_error_with_its_message() {
        let caught = contain(async { panic!("overflow when adding duration to instant") }).await;
        assert_eq!(
            caught,
            Err(Panicked(
                "overflow when adding duration to instant".to_string()
            ))
        );
        let formatted = contain(async {
            let n = 7;
            panic!("value {n}")
        })
        .await;
        assert_eq!(formatted, Err(Panicked("value 7".to_string())));
        assert_eq!(contain(async { 3 }).await, Ok(3));
    }

    #[tokio::test]
    async fn a_long_message_is_cut() {
        let long = "é".repeat(400);
        let caught: Result<(), Panicked> = contain(async move { panic!("{long}") }).await;
        let Err(Panicked(kept)) = caught else {
            panic!("no panic caught");
        };
        assert!(kept.len() <= MESSAGE_MAX + '…'.len_utf8(), "{}", kept.len());
        assert!(kept.ends_with('…'));
    }
}
