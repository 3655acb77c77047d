//! Reading a Rust file as text for its imports: comments, string and char literals and
//! `#[cfg(test)]` items removed, `use` trees expanded, paths in code found, and what a crate root
//! re-exports.

use std::collections::BTreeMap;

use super::ModulePath;

/// A file's text without comments, string and char literals, and `#[cfg(test)]` items; and the
/// names of the child modules declared under `#[cfg(test)]`.
pub(super) struct Cleaned {
    pub(super) text: String,
    pub(super) test_modules: Vec<String>,
}

pub(super) fn clean(text: &str) -> Cleaned {
    let stripped = strip_literals(text);
    let mut out = String::with_capacity(stripped.len());
    let mut test_modules = Vec::new();
    let mut rest = stripped.as_str();
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let mut item = rest[at + "#[cfg(test)]".len()..].trim_start();
        // Further attributes of the same item.
        while item.starts_with("#[") {
            let end = matching(item, '[', ']').unwrap_or(item.len());
            item = item[end..].trim_start();
        }
        let semicolon = item.find(';');
        let brace = item.find('{');
        let end = match (semicolon, brace) {
            (Some(s), Some(b)) if s < b => s + 1,
            (Some(s), None) => s + 1,
            (_, Some(b)) => b + matching(&item[b..], '{', '}').unwrap_or(item.len() - b),
            (None, None) => item.len(),
        };
        let declared = &item[..end];
        if let Some(name) = declared
            .trim_start_matches("pub(crate) ")
            .trim_start_matches("pub ")
            .strip_prefix("mod ")
            .and_then(|r| r.strip_suffix(';'))
        {
            test_modules.push(name.trim().to_string());
        }
        rest = &item[end..];
    }
    out.push_str(rest);
    Cleaned {
        text: out,
        test_modules,
    }
}

/// The index just past the bracket that closes the one `text` starts with.
fn matching(text: &str, open: char, close: char) -> Option<usize> {
    let mut depth = 0usize;
    for (i, c) in text.char_indices() {
        if c == open {
            depth += 1;
        } else if c == close {
            depth = depth.checked_sub(1)?;
            if depth == 0 {
                return Some(i + c.len_utf8());
            }
        }
    }
    None
}

/// `text` with comments removed and string and char literals emptied (so neither a brace nor a
/// path inside them counts).
fn strip_literals(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        match (c, next) {
            ('/', Some('/')) => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            ('/', Some('*')) => {
                let mut depth = 0;
                while i < chars.len() {
                    if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                        depth += 1;
                        i += 2;
                    } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                        depth -= 1;
                        i += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        i += 1;
                    }
                }
                out.push(' ');
            }
            ('r', Some('"' | '#')) if !is_ident(chars.get(i.wrapping_sub(1)).copied()) => {
                // A raw string: r"...", r#"..."#.
                let mut j = i + 1;
                let mut hashes = 0;
                while chars.get(j) == Some(&'#') {
                    hashes += 1;
                    j += 1;
                }
                if chars.get(j) != Some(&'"') {
                    out.push(c);
                    i += 1;
                    continue;
                }
                j += 1;
                loop {
                    match chars.get(j) {
                        None => break,
                        Some('"') if (1..=hashes).all(|h| chars.get(j + h) == Some(&'#')) => {
                            j += 1 + hashes;
                            break;
                        }
                        Some(_) => j += 1,
                    }
                }
                out.push_str("\"\"");
                i = j;
            }
            ('"', _) => {
                i += 1;
                while i < chars.len() && chars[i] != '"' {
                    if chars[i] == '\\' {
                        i += 1;
                    }
                    i += 1;
                }
                i += 1;
                out.push_str("\"\"");
            }
            ('\'', Some('\\')) => {
                i += 2;
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
                i += 1;
                out.push_str("' '");
            }
            ('\'', Some(_)) if chars.get(i + 2) == Some(&'\'') => {
                i += 3;
                out.push_str("' '");
            }
            _ => {
                out.push(c);
                i += 1;
            }
        }
    }
    out
}

pub(super) fn is_ident(c: Option<char>) -> bool {
    c.is_some_and(|c| c.is_alphanumeric() || c == '_')
}

/// One path a file names: its segments as written (`crate`, `loadbalancer`, `pass`, `apply`), and
/// whether it came from a `use` tree (where a first segment may name a child module).
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Named {
    pub(super) segments: Vec<String>,
    pub(super) in_use: bool,
}

/// Every path of `text` that may lead to a module of this crate.
pub(super) fn paths(text: &str, lib_name: &str) -> Vec<Named> {
    let mut out = Vec::new();
    // `use` trees, expanded.
    let mut rest = text;
    while let Some(at) = find_keyword(rest, "use") {
        let after = &rest[at + 3..];
        let Some(end) = after.find(';') else { break };
        for segments in expand_use(&after[..end]) {
            out.push(Named {
                segments,
                in_use: true,
            });
        }
        rest = &after[end..];
    }
    // Paths in code.
    let starts = ["crate", "super", "self", lib_name];
    let chars: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        if is_ident(Some(chars[i]))
            && !is_ident(i.checked_sub(1).and_then(|p| chars.get(p).copied()))
        {
            let (segments, end) = path_at(&chars, i);
            if segments.len() > 1 && starts.contains(&segments[0].as_str()) {
                out.push(Named {
                    segments,
                    in_use: false,
                });
            }
            i = end.max(i + 1);
        } else {
            i += 1;
        }
    }
    out
}

/// The position of the keyword `word` in `text`, standing alone.
fn find_keyword(text: &str, word: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(at) = text[from..].find(word) {
        let at = from + at;
        let before = text[..at].chars().next_back();
        let after = text[at + word.len()..].chars().next();
        if !is_ident(before) && after.is_some_and(char::is_whitespace) {
            return Some(at);
        }
        from = at + word.len();
    }
    None
}

/// The `a::b::c` path starting at `i` (identifiers joined by `::`), and where it ends.
fn path_at(chars: &[char], mut i: usize) -> (Vec<String>, usize) {
    let mut segments = Vec::new();
    loop {
        let start = i;
        while i < chars.len() && is_ident(Some(chars[i])) {
            i += 1;
        }
        segments.push(chars[start..i].iter().collect());
        if chars.get(i) == Some(&':') && chars.get(i + 1) == Some(&':') {
            let mut j = i + 2;
            while chars.get(j).is_some_and(|c| c.is_whitespace()) {
                j += 1;
            }
            if is_ident(chars.get(j).copied()) {
                i = j;
                continue;
            }
        }
        return (segments, i);
    }
}

/// The paths of one `use` tree (`crate::{a::b, c::{self, d}}` -> `crate::a::b`, `crate::c`,
/// `crate::c::d`); `as` renames and globs end a path.
fn expand_use(tree: &str) -> Vec<Vec<String>> {
    let tree: String = tree.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut out = Vec::new();
    expand(&tree, &[], &mut out);
    out
}

fn expand(tree: &str, prefix: &[String], out: &mut Vec<Vec<String>>) {
    let tree = tree.trim().trim_start_matches("::").trim();
    if let Some(open) = tree.find('{') {
        let head: Vec<String> = tree[..open]
            .split("::")
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect();
        let mut here = prefix.to_vec();
        here.extend(head);
        let close = open + matching(&tree[open..], '{', '}').unwrap_or(tree.len() - open);
        let inner = &tree[open + 1..close.saturating_sub(1)];
        for part in split_top(inner) {
            expand(part, &here, out);
        }
        return;
    }
    let path = tree.split(" as ").next().unwrap_or(tree);
    let mut segments = prefix.to_vec();
    for s in path.split("::").map(str::trim).filter(|s| !s.is_empty()) {
        if s == "*" {
            break;
        }
        if s == "self" && !segments.is_empty() {
            continue;
        }
        segments.push(s.to_string());
    }
    if !segments.is_empty() {
        out.push(segments);
    }
}

/// `a, b::{c, d}, e` split at the top-level commas.
fn split_top(text: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts.into_iter().filter(|p| !p.trim().is_empty()).collect()
}

/// What the crate root re-exports: name -> the path it comes from.
pub(super) fn root_reexports(text: &str) -> BTreeMap<String, ModulePath> {
    let mut out = BTreeMap::new();
    let mut rest = text;
    while let Some(at) = rest.find("pub use ") {
        let after = &rest[at + "pub use ".len()..];
        let Some(end) = after.find(';') else { break };
        for segments in expand_use(&after[..end]) {
            if let Some((name, from)) = segments.split_last() {
                let from: Vec<String> = from
                    .iter()
                    .filter(|s| s.as_str() != "crate")
                    .cloned()
                    .collect();
                out.insert(name.clone(), [from, vec![name.clone()]].concat());
            }
        }
        rest = &after[end..];
    }
    out
}
