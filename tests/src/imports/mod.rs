//! The import graph of capi-lb's crates, read from their source the way `rustc` resolves paths
//! (well enough for a picture: `use` trees, `crate::`/`super::`/`self::` paths in code, paths into a
//! crate's own library from its binaries, re-exports of a crate root followed), and checked
//! against the layers that `docs/architecture.md` states.
//!
//! A crate's files are its modules. Test code is not part of the picture: comments, string
//! literals and items under `#[cfg(test)]` are removed before imports are read. Two granularities:
//!
//! - **units**: a crate's top-level modules (a file or a folder; `main` for the binary): every
//!   arrow between two units must go from a higher floor to a lower one, as the documentation's
//!   table places them, and units never import each other in a circle;
//! - **files** inside one unit: no circle either. A file may use what its folder's `mod.rs` (the
//!   folder's face) defines without that counting as an arrow: the face stands above its files.

mod source;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use source::{Cleaned, Named, clean, paths, root_reexports};

/// A module path inside a crate (`["loadbalancer", "pass"]`); empty for the crate root.
pub type ModulePath = Vec<String>;

/// One crate as read from its source.
#[derive(Debug, Default)]
pub struct Crate {
    /// The name its library has in other crates' paths (`capi_lb`).
    pub lib_name: String,
    /// Every file, by its path relative to `src/` (`loadbalancer/pass.rs`), with its module path.
    pub files: BTreeMap<String, ModulePath>,
    /// Arrows between files (relative paths), each with the names that make it.
    pub arrows: BTreeMap<(String, String), BTreeSet<String>>,
}

/// The unit a file belongs to: its top-level module, `main` for the binary's root, `bin/<name>`
/// for another binary, and `None` for the library root (`lib.rs`), which only hands names on.
pub fn unit_of(file: &str) -> Option<String> {
    if file == "lib.rs" {
        return None;
    }
    if file == "main.rs" {
        return Some("main".into());
    }
    if let Some(rest) = file.strip_prefix("bin/") {
        let name = rest.split('/').next().unwrap_or(rest);
        return Some(format!("bin/{}", name.trim_end_matches(".rs")));
    }
    let first = file.split('/').next().unwrap_or(file);
    Some(first.trim_end_matches(".rs").to_string())
}

/// The module path of a file: `lib.rs` is the root, `a/mod.rs` and `a.rs` are `a`, `a/b.rs` is
/// `a::b`. Binaries (`main.rs`, `bin/...`) are roots of their own: `None`.
pub fn module_path(file: &str) -> Option<ModulePath> {
    if file == "main.rs" || file.starts_with("bin/") {
        return None;
    }
    let trimmed = file.trim_end_matches(".rs");
    let mut parts: Vec<String> = trimmed.split('/').map(str::to_string).collect();
    if parts.last().map(String::as_str) == Some("mod") || parts == ["lib"] {
        parts.pop();
    }
    Some(parts)
}

/// Read the crate whose sources are under `src` and whose library is called `lib_name` elsewhere.
pub fn read_crate(src: &Path, lib_name: &str) -> std::io::Result<Crate> {
    let mut sources = BTreeMap::new();
    collect(src, src, &mut sources)?;
    Ok(analyse(lib_name, &sources))
}

fn collect(root: &Path, dir: &Path, out: &mut BTreeMap<String, String>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            collect(root, &path, out)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            let rel = path
                .strip_prefix(root)
                .map_err(std::io::Error::other)?
                .to_string_lossy()
                .replace('\\', "/");
            out.insert(rel, std::fs::read_to_string(&path)?);
        }
    }
    Ok(())
}

/// Analyse the sources of one crate (relative path -> text).
pub fn analyse(lib_name: &str, sources: &BTreeMap<String, String>) -> Crate {
    let cleaned: BTreeMap<&String, Cleaned> = sources
        .iter()
        .map(|(file, text)| (file, clean(text)))
        .collect();
    // Files declared only under #[cfg(test)] (`#[cfg(test)] mod testing;`) are test code.
    let mut test_modules: BTreeSet<ModulePath> = BTreeSet::new();
    for (file, c) in &cleaned {
        if let Some(parent) = module_path(file) {
            for name in &c.test_modules {
                let mut m = parent.clone();
                m.push(name.clone());
                test_modules.insert(m);
            }
        }
    }
    let mut files: BTreeMap<String, ModulePath> = BTreeMap::new();
    let mut by_module: BTreeMap<ModulePath, String> = BTreeMap::new();
    for file in sources.keys() {
        let module = module_path(file);
        if module
            .as_ref()
            .is_some_and(|m| test_modules.iter().any(|t| m.starts_with(t)))
        {
            continue;
        }
        if let Some(m) = &module {
            by_module.insert(m.clone(), file.clone());
        }
        files.insert(file.clone(), module.unwrap_or_default());
    }
    let reexports = cleaned
        .get(&"lib.rs".to_string())
        .map(|c| root_reexports(&c.text))
        .unwrap_or_default();
    let modules: BTreeSet<ModulePath> = by_module.keys().cloned().collect();
    let mut arrows: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    for (file, c) in &cleaned {
        if !files.contains_key(*file) {
            continue;
        }
        let here = module_path(file);
        for path in paths(&c.text, lib_name) {
            let Some((absolute, shown)) = absolute(&path, here.as_deref(), lib_name, &modules)
            else {
                continue;
            };
            let target = resolve(&absolute, &modules, &reexports);
            let Some(target_file) = by_module.get(&target) else {
                continue;
            };
            if target_file == *file {
                continue;
            }
            arrows
                .entry(((*file).clone(), target_file.clone()))
                .or_default()
                .insert(shown);
        }
    }
    Crate {
        lib_name: lib_name.to_string(),
        files,
        arrows,
    }
}

/// `path` as a path from this crate's root (with how to show it), or `None` when it leads
/// elsewhere (another crate, std, a local name). `here` is the module of the file that names it
/// (`None` in a binary, whose `crate` is not the library).
fn absolute(
    path: &Named,
    here: Option<&[String]>,
    lib_name: &str,
    modules: &BTreeSet<ModulePath>,
) -> Option<(ModulePath, String)> {
    let shown = path.segments.join("::");
    let mut segments = path.segments.iter().map(String::as_str).peekable();
    let first = segments.next()?;
    let mut base: ModulePath = match (first, here) {
        (f, _) if f == lib_name => Vec::new(),
        ("crate", Some(_)) => Vec::new(),
        ("self", Some(h)) => h.to_vec(),
        ("super", Some(h)) => {
            let mut b = h.to_vec();
            b.pop();
            while segments.peek() == Some(&"super") {
                segments.next();
                b.pop();
            }
            b
        }
        (child, Some(h)) if path.in_use => {
            // `use child::...` inside a module names its child module.
            let mut b = h.to_vec();
            b.push(child.to_string());
            if !modules.contains(&b) {
                return None;
            }
            b
        }
        _ => return None,
    };
    base.extend(segments.map(str::to_string));
    Some((base, shown))
}

/// The module `path` leads to: the longest module it starts with; a name re-exported by the crate
/// root leads to where it comes from.
fn resolve(
    path: &[String],
    modules: &BTreeSet<ModulePath>,
    reexports: &BTreeMap<String, ModulePath>,
) -> ModulePath {
    let longest = (0..=path.len())
        .rev()
        .map(|n| path[..n].to_vec())
        .find(|p| modules.contains(p))
        .unwrap_or_default();
    if longest.is_empty()
        && let Some(name) = path.first()
        && let Some(origin) = reexports.get(name)
        && !origin.is_empty()
    {
        let mut followed = origin.clone();
        followed.extend(path[1..].iter().cloned());
        return resolve(&followed, modules, &BTreeMap::new());
    }
    longest
}

impl Crate {
    /// Arrows between units (from, to) with the file arrows that make each.
    pub fn unit_arrows(&self) -> BTreeMap<(String, String), Vec<String>> {
        let mut out: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
        for ((from, to), names) in &self.arrows {
            let (Some(a), Some(b)) = (unit_of(from), unit_of(to)) else {
                continue;
            };
            if a != b {
                let names: Vec<&str> = names.iter().map(String::as_str).collect();
                out.entry((a, b))
                    .or_default()
                    .push(format!("{from} -> {to}: {}", names.join(", ")));
            }
        }
        out
    }

    /// Arrows between files of one unit, except those to the face (`mod.rs`) of a folder the
    /// importing file is in.
    pub fn file_arrows_within_units(&self) -> BTreeMap<(String, String), Vec<String>> {
        let mut out = BTreeMap::new();
        for ((from, to), names) in &self.arrows {
            if unit_of(from).is_none() || unit_of(from) != unit_of(to) {
                continue;
            }
            let to_face = to
                .strip_suffix("mod.rs")
                .is_some_and(|folder| from.starts_with(folder));
            if !to_face {
                out.insert((from.clone(), to.clone()), names.iter().cloned().collect());
            }
        }
        out
    }
}

/// Every circle of `arrows` (as the nodes in order, the first repeated at the end), each once.
pub fn circles<T: Clone>(arrows: &BTreeMap<(String, String), T>) -> Vec<Vec<String>> {
    let mut next: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (from, to) in arrows.keys() {
        next.entry(from).or_default().push(to);
    }
    // From each node not yet in a reported circle, the shortest way back to it (breadth first).
    let nodes: BTreeSet<&str> = arrows
        .keys()
        .flat_map(|(a, b)| [a.as_str(), b.as_str()])
        .collect();
    let mut found = Vec::new();
    let mut done: BTreeSet<&str> = BTreeSet::new();
    for start in nodes {
        if done.contains(start) {
            continue;
        }
        // A path back to `start` through nodes not yet reported, by breadth-first search.
        let mut previous: BTreeMap<&str, &str> = BTreeMap::new();
        let mut queue = std::collections::VecDeque::from([start]);
        let mut closing = None;
        while let Some(node) = queue.pop_front() {
            for &n in next.get(node).into_iter().flatten() {
                if n == start {
                    closing = Some(node);
                    break;
                }
                if !done.contains(n) && !previous.contains_key(n) {
                    previous.insert(n, node);
                    queue.push_back(n);
                }
            }
            if closing.is_some() {
                break;
            }
        }
        if let Some(mut node) = closing {
            let mut circle = vec![start.to_string()];
            let mut back = vec![node];
            while node != start {
                node = previous[node];
                back.push(node);
            }
            back.pop();
            circle.extend(back.iter().rev().map(|s| s.to_string()));
            circle.push(start.to_string());
            for n in &back {
                done.insert(n);
            }
            found.push(circle);
        }
        done.insert(start);
    }
    found
}

/// The floors of one crate's files, as a documentation table lists them: rows
/// `| <floor> | `<file>` | ... |` after the line `<!-- modules: <crate dir> -->`, up to the first
/// line that is not a table row. A floor of `-` (the crate root, which only hands names on) is
/// `None`.
pub fn documented_floors(doc: &str, crate_dir: &str) -> Option<BTreeMap<String, Option<u32>>> {
    let marker = format!("<!-- modules: {crate_dir} -->");
    let start = doc.find(&marker)? + marker.len();
    let mut out = BTreeMap::new();
    for line in doc[start..]
        .lines()
        .map(str::trim)
        .skip_while(|l| l.is_empty())
    {
        if !line.starts_with('|') {
            break;
        }
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        let (Some(floor), Some(file)) = (cells.first(), cells.get(1)) else {
            continue;
        };
        let floor = match *floor {
            "-" => None,
            number => match number.parse::<u32>() {
                Ok(n) => Some(n),
                Err(_) => continue,
            },
        };
        let Some(file) = file.strip_prefix('`').and_then(|f| f.strip_suffix('`')) else {
            continue;
        };
        out.insert(file.to_string(), floor);
    }
    Some(out)
}

/// The files a documentation's list after `<!-- large files -->` names (items `` - `path`: why ``),
/// up to the first line that is neither an item nor its continuation.
pub fn large_files(doc: &str) -> Option<BTreeSet<String>> {
    let marker = "<!-- large files -->";
    let start = doc.find(marker)? + marker.len();
    let mut out = BTreeSet::new();
    for line in doc[start..].lines().skip_while(|l| l.trim().is_empty()) {
        if let Some(item) = line.strip_prefix("- `") {
            if let Some((path, _)) = item.split_once('`') {
                out.insert(path.to_string());
            }
        } else if !line.starts_with("  ") {
            break;
        }
    }
    Some(out)
}

/// What is wrong with `krate` against the floors `floors` (file -> floor) the documentation gives
/// it: files missing from the table or listed but absent, units whose files sit on different
/// floors, arrows between units that do not go down, circles of units and of files within a unit.
pub fn problems(krate: &Crate, floors: &BTreeMap<String, Option<u32>>) -> Vec<String> {
    let mut out = Vec::new();
    for file in krate.files.keys() {
        if !floors.contains_key(file) {
            out.push(format!("{file} is not in the table"));
        }
    }
    for file in floors.keys() {
        if !krate.files.contains_key(file) {
            out.push(format!("{file} is in the table but does not exist"));
        }
    }
    let mut unit_floor: BTreeMap<String, u32> = BTreeMap::new();
    for (file, floor) in floors {
        let Some(unit) = unit_of(file) else { continue };
        let Some(floor) = floor else {
            out.push(format!(
                "{file} has no floor: only the crate root (lib.rs) stands on none"
            ));
            continue;
        };
        match unit_floor.get(&unit) {
            Some(f) if f != floor => out.push(format!(
                "{file} is on floor {floor}, the rest of {unit} on floor {f}: a unit is on one floor"
            )),
            _ => {
                unit_floor.insert(unit, *floor);
            }
        }
    }
    let units = krate.unit_arrows();
    for ((from, to), why) in &units {
        let (Some(a), Some(b)) = (unit_floor.get(from), unit_floor.get(to)) else {
            continue;
        };
        if a <= b {
            let way = if a == b {
                "on the same floor"
            } else {
                "upwards"
            };
            out.push(format!(
                "{from} (floor {a}) imports {to} (floor {b}), {way}: {}",
                why.join("; ")
            ));
        }
    }
    for circle in circles(&units) {
        out.push(format!("units in a circle: {}", circle.join(" -> ")));
    }
    for circle in circles(&krate.file_arrows_within_units()) {
        out.push(format!("files in a circle: {}", circle.join(" -> ")));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn krate(files: &[(&str, &str)]) -> Crate {
        let sources = files
            .iter()
            .map(|(f, t)| (f.to_string(), t.to_string()))
            .collect();
        analyse("mine", &sources)
    }

    fn arrows(c: &Crate) -> Vec<(String, String)> {
        c.arrows.keys().cloned().collect()
    }

    fn pair(a: &str, b: &str) -> (String, String) {
        (a.to_string(), b.to_string())
    }

    #[test]
    fn use_trees_code_paths_and_relative_children_are_arrows() {
        let c = krate(&[
            (
                "lib.rs",
                "pub mod a; pub mod b; pub mod c; pub use c::Thing;",
            ),
            (
                "a/mod.rs",
                "mod inner; use inner::X; use crate::{b::{self, Y}, Thing}; fn f() { super::b::z(); }",
            ),
            ("a/inner.rs", "use super::Face; pub struct X;"),
            ("b.rs", "pub struct Y; pub fn z() {}"),
            ("c.rs", "pub struct Thing;"),
            ("main.rs", "use mine::a; fn main() { mine::b::z(); }"),
        ]);
        assert_eq!(
            arrows(&c),
            [
                pair("a/inner.rs", "a/mod.rs"),
                pair("a/mod.rs", "a/inner.rs"),
                pair("a/mod.rs", "b.rs"),
                pair("a/mod.rs", "c.rs"),
                pair("lib.rs", "c.rs"),
                pair("main.rs", "a/mod.rs"),
                pair("main.rs", "b.rs"),
            ]
        );
        // The face does not count inside its folder: no circle; the crate root is no unit.
        assert!(circles(&c.file_arrows_within_units()).is_empty());
        assert!(!c.unit_arrows().keys().any(|(a, _)| a == "lib"));
    }

    #[test]
    fn comments_strings_and_test_code_are_not_read() {
        let c = krate(&[
            ("lib.rs", "pub mod a; pub mod b;"),
            (
                "a.rs",
                r##"
// use crate::b;
/* crate::b::x() */
const S: &str = "crate::b::x {";
const R: &str = r#"crate::b "# ;
const C: char = '{';
fn f<'a>(x: &'a str) {}
#[cfg(test)]
mod tests { use crate::b; fn g() { let s = "}"; } }
"##,
            ),
            ("b.rs", "pub fn x() {}"),
        ]);
        assert!(arrows(&c).is_empty(), "{:?}", arrows(&c));
    }

    #[test]
    fn a_circle_and_an_upward_arrow_are_problems() {
        let c = krate(&[
            ("lib.rs", "pub mod low; pub mod high; pub mod side;"),
            ("low.rs", "use crate::high::H; pub struct L;"),
            ("high.rs", "use crate::low::L; pub struct H;"),
            ("side/mod.rs", "mod x; mod y;"),
            ("side/x.rs", "use super::y::Y; pub struct X;"),
            ("side/y.rs", "use super::x::X; pub struct Y;"),
        ]);
        let floors: BTreeMap<String, Option<u32>> = [
            ("lib.rs", None),
            ("low.rs", Some(1)),
            ("high.rs", Some(2)),
            ("side/mod.rs", Some(3)),
            ("side/x.rs", Some(3)),
            ("side/y.rs", Some(4)),
            ("gone.rs", Some(1)),
        ]
        .into_iter()
        .map(|(f, n)| (f.to_string(), n))
        .collect();
        let found = problems(&c, &floors);
        let has = |s: &str| found.iter().any(|p| p.contains(s));
        assert!(
            has("low (floor 1) imports high (floor 2), upwards"),
            "{found:#?}"
        );
        assert!(has("units in a circle: high -> low -> high"), "{found:#?}");
        assert!(
            has("files in a circle: side/x.rs -> side/y.rs -> side/x.rs"),
            "{found:#?}"
        );
        assert!(has("side/y.rs is on floor 4"), "{found:#?}");
        assert!(
            has("gone.rs is in the table but does not exist"),
            "{found:#?}"
        );
        assert!(!has("high (floor 2) imports low"), "{found:#?}");
        assert!(!has("lib.rs"), "{found:#?}");
    }

    #[test]
    fn the_table_is_read_after_its_marker() {
        let doc = "text\n<!-- modules: api -->\n\n| floor | file | what |\n|---:|---|---|\n| 2 | `a.rs` | x |\n| 1 | `b/mod.rs` | y |\n| - | `lib.rs` | root |\n\nafter\n| 9 | `c.rs` | z |\n";
        let floors = documented_floors(doc, "api").unwrap();
        assert_eq!(floors.len(), 3);
        assert_eq!(floors["a.rs"], Some(2));
        assert_eq!(floors["b/mod.rs"], Some(1));
        assert_eq!(floors["lib.rs"], None);
        assert!(documented_floors(doc, "providers").is_none());
    }
}
