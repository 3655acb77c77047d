//! The documentation against what a machine can check, so that it stays true: relative links and
//! their anchors resolve, every flag shown for `capi-lb` (or `capi-lb-bench`) is one of its
//! subcommand's flags (from clap: `capi_lb::cli::Cli`, `capi_lb_bench::cli::Cli`), a `--flag` shown
//! alone is theirs or another tool's listed in `OTHER_TOOLS`, the offline commands shown
//! (`simulate`, `crds`, `manifests`) run as the binary would run them (writing into a scratch
//! directory, never the checkout), and the `examples/`, `templates/` and `config/` paths named exist.
//!
//! The documentation is README.md, CHANGELOG.md, templates/README.md, docs/**/*.md and the comment
//! at the top of every file under examples/ and templates/. A small scanner reads it: fenced code
//! blocks, inline code spans (also across the lines of a paragraph), links and ATX headings.
//! Commands are found in code blocks, code spans and the comment lines of examples and templates:
//! `capi-lb <subcommand> ...` and `cargo run -- <subcommand> ...`, up to a `|`, `&&`, `;` or `#`. A
//! command expected to fail says so in its trailing comment (`# fails: ...`, `# exit status 2`); a
//! code span that capi-lb's parser refuses (`manifests --chart-dir`) names a command and is not run.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

use capi_lb::cli::{Cli, Command};
use capi_lb::sim::simulate::{Options, read, simulate};
use capi_lb_tests::repo;
use clap::{CommandFactory, Parser};

/// Flags of other tools that the documentation shows alone in backticks (`--flag`, not in a command
/// line of their tool): (tool, flag). Such a flag must be capi-lb's, capi-lb-bench's or one of
/// these.
const OTHER_TOOLS: &[(&str, &str)] = &[
    ("cargo test", "--test-threads"),
    ("kube-apiserver", "--shutdown-delay-duration"),
    ("clusterctl", "--config"),
    ("clusterctl", "--control-plane-machine-count"),
    ("clusterctl", "--flavor"),
    ("clusterctl", "--include-namespace"),
    ("clusterctl", "--infrastructure"),
    ("clusterctl", "--list-variables"),
    ("etcd", "--unsafe-no-fsync"),
    ("external-dns", "--domain-filter"),
    ("external-dns", "--interval"),
    ("external-dns", "--label-filter"),
    ("external-dns", "--policy"),
    ("external-dns", "--provider"),
    ("external-dns", "--registry"),
    ("external-dns", "--rfc2136-gss-tsig"),
    ("external-dns", "--rfc2136-kerberos-password"),
    ("external-dns", "--rfc2136-kerberos-realm"),
    ("external-dns", "--rfc2136-kerberos-username"),
    ("external-dns", "--source"),
    ("external-dns", "--txt-owner-id"),
    ("helm", "--create-namespace"),
    ("helm", "--kube-version"),
    ("kube-apiserver", "--advertise-address"),
    ("kube-apiserver", "--endpoint-reconciler-type"),
    ("kubectl", "--force-conflicts"),
    ("metallb", "--lb-class"),
];

/// A file of the documentation, scanned.
struct Doc {
    /// Its path from the repository's root.
    file: String,
    /// Lines that may hold commands: a fenced code block's (continuations joined), or a comment
    /// line at the top of an example or template (`prose`: only known subcommands count).
    code: Vec<Line>,
    /// Inline code spans, with the line they start on.
    spans: Vec<(usize, String)>,
    /// Link targets outside code, with their line.
    links: Vec<(usize, String)>,
    /// The anchors of its headings (GitHub's slugs) and of `<a id=..>` / `<a name=..>`.
    anchors: BTreeSet<String>,
}

struct Line {
    number: usize,
    text: String,
    prose: bool,
}

/// The markdown files and the files whose top comment is documentation.
fn documentation() -> Vec<Doc> {
    let mut markdown = vec![
        "README.md".to_string(),
        "CHANGELOG.md".into(),
        "templates/README.md".into(),
    ];
    markdown.extend(
        files_under("docs")
            .into_iter()
            .filter(|f| f.ends_with(".md")),
    );
    let mut docs: Vec<Doc> = markdown.iter().map(|f| scan_markdown(f)).collect();
    for dir in ["examples", "templates"] {
        for file in files_under(dir) {
            if !file.ends_with(".md") {
                docs.push(scan_header_comment(&file));
            }
        }
    }
    docs
}

/// Every file under `dir` (from the repository's root), sorted.
fn files_under(dir: &str) -> Vec<String> {
    fn walk(path: &Path, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(path).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else {
                out.push(path.to_string_lossy().into_owned());
            }
        }
    }
    let root = repo("");
    let mut out = Vec::new();
    walk(&repo(dir), &mut out);
    let mut files: Vec<String> = out
        .iter()
        .map(|f| {
            Path::new(f)
                .strip_prefix(&root)
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    files.sort();
    files
}

fn read_text(file: &str) -> String {
    std::fs::read_to_string(repo(file)).unwrap_or_else(|e| panic!("{file}: {e}"))
}

/// A fence that opens or closes a code block: its character and length.
fn fence(line: &str) -> Option<(char, usize)> {
    let trimmed = line.trim_start();
    let c = trimmed.chars().next().filter(|c| *c == '`' || *c == '~')?;
    let n = trimmed.chars().take_while(|x| *x == c).count();
    (n >= 3).then_some((c, n))
}

fn scan_markdown(file: &str) -> Doc {
    scan_markdown_text(file, &read_text(file))
}

fn scan_markdown_text(file: &str, text: &str) -> Doc {
    let mut doc = Doc {
        file: file.into(),
        code: Vec::new(),
        spans: Vec::new(),
        links: Vec::new(),
        anchors: BTreeSet::new(),
    };
    let mut slugs: BTreeMap<String, usize> = BTreeMap::new();
    let mut open: Option<(char, usize)> = None;
    let mut pending: Option<Line> = None;
    // The paragraph being gathered: its first line's number and its lines.
    let mut paragraph: (usize, Vec<&str>) = (0, Vec::new());
    for (i, line) in text.lines().enumerate() {
        let number = i + 1;
        if let Some((c, n)) = open {
            if fence(line).is_some_and(|(d, m)| d == c && m >= n && line.trim().len() == m) {
                open = None;
                doc.code.extend(pending.take());
                continue;
            }
            // A line ending in `\` goes on in the next one.
            let part = line.trim();
            let joined = match pending.take() {
                Some(mut p) => {
                    p.text.push(' ');
                    p.text.push_str(part);
                    p
                }
                None => Line {
                    number,
                    text: part.into(),
                    prose: false,
                },
            };
            if let Some(stripped) = joined.text.strip_suffix('\\') {
                pending = Some(Line {
                    text: stripped.trim_end().into(),
                    ..joined
                });
            } else {
                doc.code.push(joined);
            }
            continue;
        }
        if let Some(f) = fence(line) {
            scan_paragraph(&mut doc, paragraph.0, &paragraph.1);
            paragraph = (0, Vec::new());
            open = Some(f);
            continue;
        }
        if let Some(heading) = atx_heading(line) {
            let slug = slug(&heading);
            let seen = slugs.entry(slug.clone()).or_insert(0);
            doc.anchors.insert(if *seen == 0 {
                slug
            } else {
                format!("{slug}-{seen}")
            });
            *seen += 1;
        }
        for key in ["id=\"", "name=\""] {
            if let Some(at) = line.find(&format!("<a {key}")) {
                let rest = &line[at + 3 + key.len()..];
                doc.anchors
                    .insert(rest.split('"').next().unwrap_or_default().into());
            }
        }
        if line.trim().is_empty() {
            scan_paragraph(&mut doc, paragraph.0, &paragraph.1);
            paragraph = (0, Vec::new());
        } else {
            if paragraph.1.is_empty() {
                paragraph.0 = number;
            }
            paragraph.1.push(line);
        }
    }
    scan_paragraph(&mut doc, paragraph.0, &paragraph.1);
    doc
}

/// The comment at the top of an example or template: its lines may hold commands, its code spans
/// are read as in markdown.
fn scan_header_comment(file: &str) -> Doc {
    let text = read_text(file);
    let mut doc = Doc {
        file: file.into(),
        code: Vec::new(),
        spans: Vec::new(),
        links: Vec::new(),
        anchors: BTreeSet::new(),
    };
    let comment: Vec<&str> = text
        .lines()
        .take_while(|l| l.starts_with('#') || l.trim().is_empty())
        .collect();
    let texts: Vec<&str> = comment.iter().map(|l| l.trim_start_matches('#')).collect();
    for (i, t) in texts.iter().enumerate() {
        doc.code.push(Line {
            number: i + 1,
            text: t.trim().into(),
            prose: true,
        });
    }
    scan_paragraph(&mut doc, 1, &texts);
    // A comment's brackets are not markdown links.
    doc.links.clear();
    doc
}

/// The code spans and links of a paragraph (lines from `first` on).
fn scan_paragraph(doc: &mut Doc, first: usize, lines: &[&str]) {
    if lines.is_empty() {
        return;
    }
    let text = lines.join("\n");
    let line_of = |at: usize| first + text[..at].matches('\n').count();
    // Code spans: a run of backticks up to the next run of the same length.
    let bytes = text.as_bytes();
    let mut outside = text.clone().into_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'`' {
            i += 1;
            continue;
        }
        let run = bytes[i..].iter().take_while(|b| **b == b'`').count();
        let mut j = i + run;
        let mut close = None;
        while j < bytes.len() {
            if bytes[j] == b'`' {
                let other = bytes[j..].iter().take_while(|b| **b == b'`').count();
                if other == run {
                    close = Some(j);
                    break;
                }
                j += other;
            } else {
                j += 1;
            }
        }
        let Some(end) = close else {
            i += run;
            continue;
        };
        let content = text[i + run..end].replace('\n', " ");
        doc.spans.push((line_of(i), content.trim().to_string()));
        for b in &mut outside[i..end + run] {
            if *b != b'\n' {
                *b = b' ';
            }
        }
        i = end + run;
    }
    let outside = String::from_utf8(outside).unwrap();
    // Inline links and images: `](target)`.
    let mut from = 0;
    while let Some(at) = outside[from..].find("](") {
        let start = from + at + 2;
        let mut depth = 1;
        let mut end = start;
        for (k, c) in outside[start..].char_indices() {
            match c {
                '(' => depth += 1,
                ')' => depth -= 1,
                _ => {}
            }
            if depth == 0 {
                end = start + k;
                break;
            }
        }
        if end > start {
            let target = outside[start..end].trim();
            let target = target.split_whitespace().next().unwrap_or_default();
            let target = target.trim_start_matches('<').trim_end_matches('>');
            doc.links.push((line_of(start), target.to_string()));
        }
        from = start;
    }
    // Reference definitions: `[name]: target`.
    for (k, line) in outside.lines().enumerate() {
        let t = line.trim_start();
        if t.starts_with('[')
            && let Some(close) = t.find("]:")
            && let Some(target) = t[close + 2..].split_whitespace().next()
        {
            doc.links.push((first + k, target.to_string()));
        }
    }
}

/// The text of an ATX heading (`## Text ##`).
fn atx_heading(line: &str) -> Option<String> {
    let indent = line.len() - line.trim_start_matches(' ').len();
    let t = &line[indent..];
    let level = t.chars().take_while(|c| *c == '#').count();
    if indent > 3 || level == 0 || level > 6 {
        return None;
    }
    let rest = &t[level..];
    if !(rest.is_empty() || rest.starts_with(' ') || rest.starts_with('\t')) {
        return None;
    }
    let rest = rest.trim();
    let rest = rest.trim_end_matches('#').trim_end();
    Some(rest.to_string())
}

/// GitHub's anchor of a heading: its text as rendered (links become their text, code and emphasis
/// marks go), lowercased, without punctuation but `-` and `_`, each space a `-`.
fn slug(heading: &str) -> String {
    let mut rendered = String::new();
    let mut rest = heading;
    while let Some(open) = rest.find('[') {
        let Some(mid) = rest[open..].find("](") else {
            break;
        };
        let Some(close) = rest[open + mid..].find(')') else {
            break;
        };
        rendered.push_str(&rest[..open]);
        rendered.push_str(&rest[open + 1..open + mid]);
        rest = &rest[open + mid + close + 1..];
    }
    rendered.push_str(rest);
    rendered
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

#[test]
fn slugs_follow_github() {
    assert_eq!(slug("The import graph"), "the-import-graph");
    assert_eq!(
        slug("`capi-lb run` flags (and more!)"),
        "capi-lb-run-flags-and-more"
    );
    assert_eq!(slug("A [link](x.md) here: a/b"), "a-link-here-ab");
    assert_eq!(slug("snake_case & more"), "snake_case--more");
}

/// `path` from the repository's root, `..` resolved; None when it leaves the repository.
fn normalize(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::CurDir => {}
            Component::Normal(p) => out.push(p),
            Component::RootDir | Component::Prefix(_) => {}
        }
    }
    Some(out)
}

/// Fail with every finding, one a line, and what to do.
fn report(what: &str, findings: &[String], todo: &str) {
    assert!(
        findings.is_empty(),
        "{what}: {} finding(s)\n  {}\n{todo}",
        findings.len(),
        findings.join("\n  ")
    );
}

#[test]
fn relative_links_and_anchors_resolve() {
    let docs = documentation();
    let anchors: BTreeMap<&str, &BTreeSet<String>> =
        docs.iter().map(|d| (d.file.as_str(), &d.anchors)).collect();
    let mut findings = Vec::new();
    let mut links = 0;
    for doc in &docs {
        for (line, target) in &doc.links {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            links += 1;
            let (path, anchor) = match target.split_once('#') {
                Some((p, a)) => (p, Some(a)),
                None => (target.as_str(), None),
            };
            let here = format!("{}:{line}: ({target})", doc.file);
            let resolved = if path.is_empty() {
                Some(PathBuf::from(&doc.file))
            } else if let Some(absolute) = path.strip_prefix('/') {
                normalize(Path::new(absolute))
            } else {
                normalize(&Path::new(&doc.file).parent().unwrap().join(path))
            };
            let Some(resolved) = resolved else {
                findings.push(format!("{here}: leaves the repository"));
                continue;
            };
            let file = resolved.to_string_lossy().into_owned();
            if !repo(&file).exists() {
                findings.push(format!("{here}: no file or directory {file}"));
                continue;
            }
            let Some(anchor) = anchor else { continue };
            if !file.ends_with(".md") {
                continue;
            }
            match anchors.get(file.as_str()) {
                Some(known) if known.contains(anchor) => {}
                Some(known) => {
                    let close: Vec<&String> = known
                        .iter()
                        .filter(|k| k.contains(anchor) || anchor.contains(k.as_str()))
                        .take(3)
                        .collect();
                    findings.push(format!(
                        "{here}: {file} has no heading #{anchor}{}",
                        if close.is_empty() {
                            String::new()
                        } else {
                            format!(" (did you mean {close:?}?)")
                        }
                    ));
                }
                None => findings.push(format!("{here}: {file} is not part of the scanned docs")),
            }
        }
    }
    assert!(
        links > 50,
        "only {links} relative links found: is the scanner broken?"
    );
    report(
        "relative links that do not resolve",
        &findings,
        "Fix the link, or the heading it points at (anchors are GitHub's: lowercase, punctuation \
         dropped but `-` and `_`, spaces to `-`, repeated headings get -1, -2).",
    );
}

/// capi-lb's binaries, whose flags come from clap.
const BINARIES: &[&str] = &["capi-lb", "capi-lb-bench"];

/// A binary's flags by subcommand ("" for none): long and short names, aliases, the global ones
/// and `--help`.
type Flags = BTreeMap<String, BTreeSet<String>>;

fn flags_of(mut root: clap::Command) -> Flags {
    fn names(command: &clap::Command) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        for arg in command.get_arguments() {
            if let Some(long) = arg.get_long() {
                out.insert(format!("--{long}"));
            }
            for alias in arg.get_all_aliases().unwrap_or_default() {
                out.insert(format!("--{alias}"));
            }
            if let Some(short) = arg.get_short() {
                out.insert(format!("-{short}"));
            }
            for alias in arg.get_all_short_aliases().unwrap_or_default() {
                out.insert(format!("-{alias}"));
            }
        }
        out
    }
    root.build();
    let mut flags = BTreeMap::from([(String::new(), names(&root))]);
    for sub in root.get_subcommands() {
        flags.insert(sub.get_name().to_string(), names(sub));
    }
    flags
}

/// Every binary's flags.
fn binaries() -> BTreeMap<&'static str, Flags> {
    BTreeMap::from([
        ("capi-lb", flags_of(Cli::command())),
        (
            "capi-lb-bench",
            flags_of(capi_lb_bench::cli::Cli::command()),
        ),
    ])
}

/// A command of one of capi-lb's binaries in a line of shell: its arguments after the binary (or
/// after `cargo run ... --`), its line's trailing comment, and whether it is a `cargo run` (whose
/// first word must be a subcommand).
struct Invocation {
    binary: &'static str,
    args: Vec<String>,
    /// `NAME=value` words before the command: its environment (a template's variables).
    env: Vec<(String, String)>,
    comment: String,
    cargo: bool,
}

/// The words of a line before its comment, split into commands at `|`, `&&`, `||`, `;` and
/// redirections, and the comment.
fn commands(line: &str) -> (Vec<Vec<String>>, String) {
    let mut segments = vec![Vec::new()];
    let mut comment = String::new();
    let mut words = line.split_whitespace();
    while let Some(word) = words.next() {
        if word.starts_with('#') {
            comment = std::iter::once(word)
                .chain(words.by_ref())
                .collect::<Vec<_>>()
                .join(" ");
            break;
        }
        if ["|", "||", "&&", ";", "2>"].contains(&word) || word.starts_with('>') {
            segments.push(Vec::new());
            continue;
        }
        let ends = word.ends_with(';');
        let word = word
            .trim_end_matches(';')
            .trim_matches(|c| c == '\'' || c == '"');
        if let Some(last) = segments.last_mut() {
            last.push(word.to_string());
        }
        if ends {
            segments.push(Vec::new());
        }
    }
    (segments, comment)
}

/// The invocation of one of capi-lb's binaries in one command, if any, and where it starts.
fn invocation(words: &[String], comment: &str) -> Option<(usize, Invocation)> {
    let env_of = |before: &[String]| -> Vec<(String, String)> {
        before
            .iter()
            .filter_map(|w| w.split_once('='))
            .filter(|(k, _)| {
                !k.is_empty()
                    && k.chars()
                        .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
            })
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    for (i, w) in words.iter().enumerate() {
        let named = BINARIES
            .iter()
            .find(|b| w == *b || w.ends_with(&format!("/{b}")));
        // A word after a flag is its value (`--infrastructure capi-lb`), not a command.
        if let Some(binary) = named
            && !(i > 0 && words[i - 1].starts_with('-'))
        {
            let call = Invocation {
                binary,
                args: words[i + 1..].to_vec(),
                env: env_of(&words[..i]),
                comment: comment.into(),
                cargo: false,
            };
            return Some((i, call));
        }
        if w == "cargo" && words.get(i + 1).is_some_and(|r| r == "run") {
            let rest = &words[i + 2..];
            let dashes = rest.iter().position(|w| w == "--");
            let options = &rest[..dashes.unwrap_or(rest.len())];
            let package = options
                .windows(2)
                .find(|p| ["-p", "--package", "--bin"].contains(&p[0].as_str()))
                .map_or("capi-lb", |p| p[1].as_str());
            // `cargo run -p <another package>` is none of ours.
            let binary = BINARIES.iter().find(|b| **b == package)?;
            let call = Invocation {
                binary,
                args: dashes.map(|d| rest[d + 1..].to_vec()).unwrap_or_default(),
                env: env_of(&words[..i]),
                comment: comment.into(),
                cargo: true,
            };
            return Some((i, call));
        }
    }
    None
}

/// The name of a flag word (`--flag=value` is `--flag`, `-fvalue` is `-f`), if it is one.
fn flag_name(word: &str) -> Option<&str> {
    let word = word.trim_matches(|c| "()[],".contains(c));
    if let Some(long) = word.strip_prefix("--") {
        let name = long.split('=').next().unwrap_or_default();
        let ok = name.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        return ok.then(|| &word[..2 + name.len()]);
    }
    let mut chars = word.chars();
    (chars.next() == Some('-') && chars.next().is_some_and(|c| c.is_ascii_alphabetic()))
        .then(|| &word[..2])
}

/// What is wrong with the flags of an invocation. In `prose` (a comment line of an example), a
/// word after the binary that is no subcommand is prose, not a mistake.
fn check_invocation(call: &Invocation, prose: bool, flags: &Flags) -> Vec<String> {
    let Some(first) = call.args.first() else {
        return Vec::new();
    };
    let (sub, rest) = if flags.contains_key(first.as_str()) {
        (first.as_str(), &call.args[1..])
    } else if first.starts_with('-') {
        ("", &call.args[..])
    } else if call.cargo && !prose {
        let known: Vec<&String> = flags.keys().filter(|k| !k.is_empty()).collect();
        return vec![format!(
            "`{first}` is not a subcommand of {} (they are {known:?})",
            call.binary
        )];
    } else {
        return Vec::new();
    };
    let accepted = &flags[sub];
    let mut wrong = Vec::new();
    for word in rest {
        if word == "--" {
            break;
        }
        if let Some(name) = flag_name(word)
            && !accepted.contains(name)
        {
            let command = format!("{} {sub}", call.binary);
            let command = command.trim_end();
            let hint = match accepted.iter().min_by_key(|f| distance(f, name)) {
                Some(close) if distance(close, name) <= 3 => format!("did you mean `{close}`?"),
                _ => format!(
                    "its flags: {}",
                    accepted.iter().cloned().collect::<Vec<_>>().join(" ")
                ),
            };
            wrong.push(format!("`{name}` is not a flag of `{command}` ({hint})"));
        }
    }
    wrong
}

/// The edit distance of two words (for "did you mean").
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut previous = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitution = previous + usize::from(ca != *cb);
            previous = row[j + 1];
            row[j + 1] = substitution.min(row[j] + 1).min(previous + 1);
        }
    }
    row[b.len()]
}

#[test]
fn commands_are_found_and_their_flags_checked() {
    let binaries = binaries();
    let check = |line: &str| -> Vec<String> {
        let (segments, _) = commands(line);
        segments
            .iter()
            .filter_map(|words| invocation(words, ""))
            .flat_map(|(_, call)| check_invocation(&call, false, &binaries[call.binary]))
            .collect()
    };
    assert_eq!(
        check("cargo run -- run --providers=inmemory --log-format json"),
        [""; 0]
    );
    let wrong = check(
        "X=1 cargo run -- crds --all | kubectl apply --server-side -f - && capi-lb run --nope",
    );
    assert_eq!(wrong.len(), 1, "{wrong:?}");
    assert!(
        wrong[0].contains("`--nope` is not a flag of `capi-lb run`"),
        "{wrong:?}"
    );
    assert!(check("cargo run -- simulat -f x.yaml")[0].contains("not a subcommand of capi-lb"));
    assert!(check("capi-lb run --providrs x")[0].contains("did you mean `--providers`?"));
    assert_eq!(distance("--resync", "--resync-seconds"), 8);
    assert!(
        check("target/release/capi-lb-bench converge --loadbalancers 1 --services 2")[0]
            .contains("`--services` is not a flag of `capi-lb-bench converge`")
    );
    // Another tool's value, another package, another tool's flags.
    assert!(check("clusterctl init --infrastructure capi-lb --flavor x").is_empty());
    assert!(check("cargo run -p capi-lb-tests -- --nocapture").is_empty());
    assert!(check("cargo test -p capi-lb --workspace").is_empty());
}

#[test]
fn documented_flags_exist() {
    let binaries = binaries();
    let capi_lb = &binaries["capi-lb"];
    assert!(capi_lb["run"].contains("--providers") && capi_lb["simulate"].contains("-f"));
    let every: BTreeSet<&String> = binaries
        .values()
        .flat_map(|flags| flags.values().flatten())
        .collect();
    let mut findings = Vec::new();
    let mut checked = 0;
    for doc in documentation() {
        let mut lines: Vec<(usize, &str, bool, bool)> = doc
            .code
            .iter()
            .map(|l| (l.number, l.text.as_str(), l.prose, false))
            .collect();
        lines.extend(doc.spans.iter().map(|(n, s)| (*n, s.as_str(), false, true)));
        for (number, text, prose, span) in lines {
            let (segments, comment) = commands(text);
            for words in segments {
                if let Some((_, call)) = invocation(&words, &comment) {
                    checked += 1;
                    for wrong in check_invocation(&call, prose, &binaries[call.binary]) {
                        findings.push(format!("{}:{number}: {wrong}", doc.file));
                    }
                    continue;
                }
                if !span {
                    continue;
                }
                // A code span without a binary: `run --flag` is capi-lb's subcommand, `--flag ..`
                // stands alone, anything else is another tool's command.
                let Some(first) = words
                    .iter()
                    .find(|w| w.starts_with('-') || !w.contains('='))
                else {
                    continue;
                };
                if capi_lb.contains_key(first.as_str()) && first != "help" {
                    let call = Invocation {
                        binary: "capi-lb",
                        args: words.clone(),
                        env: Vec::new(),
                        comment: String::new(),
                        cargo: false,
                    };
                    for wrong in check_invocation(&call, false, capi_lb) {
                        findings.push(format!("{}:{number}: {wrong}", doc.file));
                    }
                } else if first.starts_with("--") {
                    for name in words.iter().filter_map(|w| flag_name(w)) {
                        let known = every.iter().any(|f| f.as_str() == name)
                            || OTHER_TOOLS.iter().any(|(_, f)| *f == name)
                            || !name.starts_with("--");
                        if !known {
                            findings.push(format!(
                                "{}:{number}: `{name}` (in `{text}`) is no flag of capi-lb or \
                                 capi-lb-bench, nor another tool's in OTHER_TOOLS",
                                doc.file
                            ));
                        }
                    }
                }
            }
        }
    }
    assert!(
        checked > 20,
        "only {checked} commands of capi-lb's binaries found: is the scanner broken?"
    );

    report(
        "flags the documentation shows that capi-lb's binaries do not have",
        &findings,
        "Fix the documentation to the flag's real name (`cargo run -- <subcommand> --help`), or, \
         for another tool's flag shown alone, add (tool, flag) to OTHER_TOOLS in \
         tests/tests/integration/docs.rs.",
    );
}

/// Whether a command's trailing comment says it is expected to fail.
fn expected_to_fail(comment: &str) -> bool {
    let comment = comment.to_lowercase();
    comment.contains("fail") || comment.contains("exit status")
}

/// A scratch directory for what a documented command writes, never the checkout.
fn scratch(n: usize) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("capi-lb-docs-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Run one offline command as the binary would (from the repository's root, writing into a
/// scratch directory): Ok, or why it failed.
async fn run_offline(args: &[String], env: &[(String, String)], n: usize) -> Result<(), String> {
    let cli =
        Cli::try_parse_from(std::iter::once("capi-lb".to_string()).chain(args.iter().cloned()))
            .map_err(|e| {
                format!(
                    "capi-lb refuses the command line: {}",
                    e.to_string().lines().next().unwrap_or_default()
                )
            })?;
    match cli.command {
        None => simulate_files(&[], false, env).await,
        // No `..`: a new flag of `simulate` is to be honoured here as the binary does.
        Some(Command::Simulate {
            files,
            expect_ready,
        }) => simulate_files(&files, expect_ready, env).await,
        Some(Command::Crds {
            output_dir: Some(_),
            ..
        }) => {
            let dir = scratch(n);
            let written = capi_lb::install::crds::write(&dir).map_err(|e| e.to_string());
            let _ = std::fs::remove_dir_all(&dir);
            written.map(drop)
        }
        Some(Command::Crds { all, .. }) => {
            let crds = if all {
                capi_lb::install::crds::all()
            } else {
                capi_lb::install::crds::shipped()
            };
            capi_lb::install::crds::to_yaml_stream(&crds)
                .map(drop)
                .map_err(|e| e.to_string())
        }
        Some(Command::Manifests { .. }) => {
            use clap::Args;
            let dir = scratch(n);
            let run = capi_lb::run::RunOptions::augment_args(clap::Command::new("run"));
            let written = capi_lb::install::manifests::write(&dir.join("config"))
                .map_err(|e| e.to_string())
                .and_then(|_| {
                    capi_lb::install::chart::write(&dir.join("chart"), &run)
                        .map_err(|e| e.to_string())
                });
            let _ = std::fs::remove_dir_all(&dir);
            written.map(drop)
        }
        Some(Command::Run(_) | Command::Uninstall { .. }) => Ok(()),
    }
}

/// `capi-lb simulate -f <files>`: the files from the repository's root.
async fn simulate_files(
    files: &[PathBuf],
    expect_ready: bool,
    env: &[(String, String)],
) -> Result<(), String> {
    // Without files, the binary simulates the quickstart it embeds.
    let quickstart = [PathBuf::from("examples/quickstart.yaml")];
    let files = if files.is_empty() {
        &quickstart[..]
    } else {
        files
    };
    let missing: Vec<String> = files
        .iter()
        .filter(|f| !repo(&f.to_string_lossy()).exists())
        .map(|f| f.display().to_string())
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "names files that do not exist: {}",
            missing.join(", ")
        ));
    }
    let paths: Vec<PathBuf> = files.iter().map(|f| repo(&f.to_string_lossy())).collect();
    let sources = read(&paths).map_err(|e| e.to_string())?;
    // The documented environment only, as a user's shell would have it set for the command.
    let options = Options {
        expect_ready,
        variables: env.iter().cloned().collect(),
    };
    let sim = simulate(&sources, &options)
        .await
        .map_err(|e| e.to_string())?;
    if expect_ready && !sim.not_ready.is_empty() {
        return Err(format!(
            "not Ready at the end: {}",
            sim.not_ready.join(", ")
        ));
    }
    Ok(())
}

#[tokio::test]
async fn documented_offline_commands_run() {
    let binaries = binaries();
    let flags = &binaries["capi-lb"];
    // Each distinct command once (with whether it is expected to fail), with every place that
    // shows it.
    type Shown = (Vec<String>, Vec<(String, String)>, bool);
    let mut commands: BTreeMap<Shown, Vec<String>> = BTreeMap::new();
    for doc in documentation() {
        let mut lines: Vec<(usize, &str, bool, bool)> = doc
            .code
            .iter()
            .map(|l| (l.number, l.text.as_str(), l.prose, false))
            .collect();
        lines.extend(doc.spans.iter().map(|(n, s)| (*n, s.as_str(), false, true)));
        for (number, text, prose, span) in lines {
            let (segments, comment) = self::commands(text);
            for words in segments {
                let Some((_, call)) = invocation(&words, &comment) else {
                    continue;
                };
                let sub = call.args.first().map(String::as_str).unwrap_or_default();
                let offline = ["simulate", "crds", "manifests"].contains(&sub)
                    || call.args.is_empty() && call.cargo;
                if call.binary != "capi-lb" || !offline || prose && !flags.contains_key(sub) {
                    continue;
                }
                let mut args = call.args.clone();
                // In a comment line, the command ends at the first word that is neither a flag
                // nor a path.
                if prose {
                    let end = args
                        .iter()
                        .skip(1)
                        .position(|w| !(w.starts_with('-') || w.contains('/') || w.contains('.')))
                        .map_or(args.len(), |p| p + 1);
                    args.truncate(end);
                }
                // Placeholders are not runnable; a code span capi-lb refuses names a command
                // (`manifests --chart-dir`) rather than showing one.
                let parses = Cli::try_parse_from(
                    std::iter::once("capi-lb").chain(args.iter().map(String::as_str)),
                )
                .is_ok();
                if args.iter().any(|a| a.contains('<') || a.contains('$')) || span && !parses {
                    continue;
                }
                commands
                    .entry((args, call.env.clone(), expected_to_fail(&call.comment)))
                    .or_default()
                    .push(format!("{}:{number}", doc.file));
            }
        }
    }
    let simulations = commands
        .keys()
        .filter(|(a, _, _)| a.first().is_some_and(|s| s == "simulate"))
        .count();
    assert!(
        simulations >= 5,
        "only {simulations} simulate commands found: is the scanner broken?"
    );
    let mut findings = Vec::new();
    for (n, ((args, env, fails), places)) in commands.iter().enumerate() {
        let line = format!("capi-lb {}", args.join(" "));
        let outcome = run_offline(args, env, n).await;
        let problem = match (outcome, fails) {
            (Ok(()), false) | (Err(_), true) => continue,
            (Ok(()), true) => "is marked as failing but succeeds".to_string(),
            (Err(e), false) => format!("fails: {e}"),
        };
        for place in places {
            findings.push(format!("{place}: `{line}` {problem}"));
        }
    }
    report(
        "documented offline commands that do not do what the documentation says",
        &findings,
        "Fix the command (or the file it names), or mark it as expected to fail in its trailing \
         comment (`# fails: ...` or `# exit status 2: ...`).",
    );
}

/// The words of a text that name a path under `examples/`, `templates/` or `config/` (placeholders
/// and globs left out).
fn named_paths(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for word in text.split(|c: char| c.is_whitespace() || "=(),`'\"[]{}".contains(c)) {
        let word = word.trim_start_matches("./");
        let word = word.trim_end_matches(|c| ".,;:".contains(c));
        let named = ["examples/", "templates/", "config/"]
            .iter()
            .any(|p| word.starts_with(p));
        if named && !word.contains(|c| "<>*$|".contains(c)) {
            out.push(word.to_string());
        }
    }
    out
}

#[test]
fn named_repository_paths_exist() {
    let mut findings = Vec::new();
    let mut named = 0;
    for doc in documentation() {
        let texts = doc
            .code
            .iter()
            .map(|l| (l.number, l.text.as_str()))
            .chain(doc.spans.iter().map(|(n, s)| (*n, s.as_str())));
        let mut seen = BTreeSet::new();
        for (number, text) in texts {
            for path in named_paths(text) {
                named += 1;
                if !repo(&path).exists() && seen.insert((number, path.clone())) {
                    findings.push(format!("{}:{number}: `{path}` does not exist", doc.file));
                }
            }
        }
    }
    assert!(
        named > 20,
        "only {named} paths found: is the scanner broken?"
    );
    report(
        "paths the documentation names that are not in the repository",
        &findings,
        "Fix the path (from the repository's root), or the sentence that names it.",
    );
}

/// Every list of three or more provider names the documentation shows (in code or a code span;
/// the CHANGELOG, which tells history, aside) is the default list, `capi-lb run`'s and every
/// install's, unless it names the in-memory provider (a choice made on purpose). Two lists of the
/// same installs once disagreed (`kubedc,octavia,service` beside `...,dns,zoned`).
#[test]
fn provider_lists_shown_are_the_default() {
    let names = capi_lb_providers::catalog::names();
    let mut findings = Vec::new();
    let mut lists = 0;
    for doc in documentation()
        .into_iter()
        .filter(|d| d.file != "CHANGELOG.md")
    {
        let texts = doc
            .code
            .iter()
            .map(|l| (l.number, l.text.as_str()))
            .chain(doc.spans.iter().map(|(n, s)| (*n, s.as_str())));
        for (number, text) in texts {
            for word in text.split(|c: char| c.is_whitespace() || "=`'\"[]{}()".contains(c)) {
                let word = word.trim_end_matches(|c| ".;:".contains(c));
                let parts: Vec<&str> = word.split(',').collect();
                if parts.len() < 3 || !parts.iter().all(|p| names.contains(p)) {
                    continue;
                }
                lists += 1;
                if !parts.contains(&"inmemory")
                    && word != capi_lb_providers::catalog::DEFAULT_PROVIDERS
                {
                    findings.push(format!(
                        "{}:{number}: `{word}` is not the default `{}`",
                        doc.file,
                        capi_lb_providers::catalog::DEFAULT_PROVIDERS
                    ));
                }
            }
        }
    }
    assert!(
        lists >= 3,
        "only {lists} lists found: is the scanner broken?"
    );
    report(
        "provider lists that are not the default",
        &findings,
        "Say the default list (providers/src/catalog.rs DEFAULT_PROVIDERS), or name a choice with \
         fewer providers.",
    );
}

#[test]
fn the_scanner_reads_code_spans_links_and_headings() {
    let text = "# Title\n\nSee [a](b.md#c), `x\ny` and `[no](z.md)`.\n\n```sh\ncargo run -- simulate \\\n  -f f.yaml   # ok\n[in](code.md)\n```\n\n## Title\n[ref]: r.md\n";
    let doc = scan_markdown_text("docs/x.md", text);
    let anchors: Vec<&str> = doc.anchors.iter().map(String::as_str).collect();
    assert_eq!(anchors, ["title", "title-1"]);
    assert_eq!(
        doc.spans,
        [(3, "x y".to_string()), (4, "[no](z.md)".to_string())]
    );
    assert_eq!(
        doc.links,
        [(3, "b.md#c".to_string()), (13, "r.md".to_string())]
    );
    let code: Vec<(usize, &str)> = doc
        .code
        .iter()
        .map(|l| (l.number, l.text.as_str()))
        .collect();
    assert_eq!(
        code,
        [
            (7, "cargo run -- simulate -f f.yaml   # ok"),
            (9, "[in](code.md)")
        ]
    );
    assert_eq!(
        named_paths("kubectl apply -f ./examples/a.yaml, config/<v>/x (templates/b.yaml)."),
        ["examples/a.yaml", "templates/b.yaml"]
    );
}

#[tokio::test]
async fn offline_commands_fail_as_the_binary_would() {
    let args = |line: &str| -> Vec<String> { line.split_whitespace().map(String::from).collect() };
    let missing = run_offline(&args("simulate -f examples/nope.yaml"), &[], 0).await;
    assert!(
        missing
            .as_ref()
            .is_err_and(|e| e.contains("examples/nope.yaml")),
        "{missing:?}"
    );
    // A hand-made -ext Service in the way: never Ready, so --expect-ready fails.
    let conflict = args("simulate --expect-ready -f examples/name-conflict.yaml");
    let not_ready = run_offline(&conflict, &[], 0).await;
    assert!(
        not_ready.as_ref().is_err_and(|e| e.contains("not Ready")),
        "{not_ready:?}"
    );
    let without = args("simulate -f examples/name-conflict.yaml");
    assert_eq!(run_offline(&without, &[], 0).await, Ok(()));
    let refused = run_offline(&args("crds --output-dir"), &[], 0).await;
    assert!(refused.is_err_and(|e| e.contains("refuses")));
    assert_eq!(run_offline(&args("crds --all"), &[], 0).await, Ok(()));
}
