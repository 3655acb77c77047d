//! The `capi-lb` binary.

fn main() {}
