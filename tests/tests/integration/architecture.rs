//! The import graph of every crate against docs/architecture.md: the documentation's tables list
//! every source file with its floor, every arrow between two top-level modules goes down, and no
//! modules (nor files within one) import each other in a circle. So the documented picture cannot go
//! stale, and a new arrow upwards or a new circle fails here (see `capi_lb_tests::imports`).

use capi_lb_tests::imports::{documented_floors, large_files, problems, read_crate};
use capi_lb_tests::repo;

/// The crates: their folder and the name of their library in other crates' paths.
const CRATES: &[(&str, &str)] = &[
    ("api", "capi_lb_api"),
    ("providers", "capi_lb_providers"),
    ("controllers", "capi_lb"),
    ("bench", "capi_lb_bench"),
];

#[test]
fn every_crate_follows_the_documented_layers_without_circles() {
    let doc = std::fs::read_to_string(repo("docs/architecture.md")).unwrap();
    let mut found = Vec::new();
    for (dir, lib) in CRATES {
        let krate = read_crate(&repo(dir).join("src"), lib).unwrap();
        assert!(
            krate.files.len() > 1,
            "{dir}: no sources read from {}",
            repo(dir).join("src").display()
        );
        let floors = documented_floors(&doc, dir).unwrap_or_else(|| {
            panic!("docs/architecture.md has no `<!-- modules: {dir} -->` table")
        });
        found.extend(
            problems(&krate, &floors)
                .into_iter()
                .map(|p| format!("{dir}/src: {p}")),
        );
    }
    assert!(
        found.is_empty(),
        "docs/architecture.md and the code disagree:\n{}",
        found.join("\n")
    );
}

/// A file of the product crates over this many lines is named, with why, in docs/architecture.md.
const LONG: usize = 700;

#[test]
fn every_file_over_seven_hundred_lines_says_why() {
    let doc = std::fs::read_to_string(repo("docs/architecture.md")).unwrap();
    let listed =
        large_files(&doc).expect("docs/architecture.md has no `<!-- large files -->` list");
    let mut found = Vec::new();
    for (dir, lib) in CRATES {
        for file in read_crate(&repo(dir).join("src"), lib)
            .unwrap()
            .files
            .keys()
        {
            let path = format!("{dir}/src/{file}");
            let lines = std::fs::read_to_string(repo(&path))
                .unwrap()
                .lines()
                .count();
            match (lines > LONG, listed.contains(&path)) {
                (true, false) => found.push(format!("{path} has {lines} lines and no reason")),
                (false, true) => found.push(format!("{path} is listed but has only {lines} lines")),
                _ => {}
            }
        }
    }
    for path in &listed {
        if !repo(path).is_file() {
            found.push(format!("{path} is listed but does not exist"));
        }
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
}
