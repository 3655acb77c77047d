//! The forge's workflows (`.github/workflows/`: `ci.yaml` runs `.ci/run`, `release.yaml` builds and
//! publishes a tag's image, clusterctl assets, chart and checksums), which cannot run here, linted
//! by the real actionlint (built from the Go module proxy by `tests/tools.sh install actionlint`):
//! any finding fails. A broken workflow is shown to be caught, so a linter that finds nothing
//! because it checked nothing cannot pass. And one image name everywhere: the generated
//! Deployment's, `hack/image.sh`'s, the Dockerfile's and the release workflow's.
//!
//! actionlint runs without its shellcheck and pyflakes integrations (`-shellcheck= -pyflakes=`), so
//! the verdict does not depend on whether those happen to be on `PATH`.

use std::path::{Path, PathBuf};
use std::process::Command;

use capi_lb::install::manifests;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// actionlint's path; fails, saying how to install it, when it is not installed.
fn actionlint() -> PathBuf {
    let out = Command::new(repo().join("tests/tools.sh"))
        .args(["path", "actionlint"])
        .output()
        .expect("running tests/tools.sh");
    assert!(
        out.status.success(),
        "actionlint is not installed: run `tests/tools.sh install actionlint` (Go, module proxy) \
         ({})",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// actionlint on `files`, run in `dir`: (success, findings).
fn lint(dir: &Path, files: &[PathBuf]) -> (bool, String) {
    let out = Command::new(actionlint())
        .args(["-no-color", "-shellcheck=", "-pyflakes="])
        .args(files)
        .current_dir(dir)
        .output()
        .expect("running actionlint");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

fn workflows() -> Vec<PathBuf> {
    let dir = repo().join(".github/workflows");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
        .collect();
    files.sort();
    files
}

#[test]
fn the_workflows_pass_actionlint() {
    let files = workflows();
    let names: Vec<String> = files
        .iter()
        .map(|f| f.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    for expected in ["ci.yaml", "release.yaml"] {
        assert!(
            names.iter().any(|n| n == expected),
            "no {expected}: {names:?}"
        );
    }
    let (ok, findings) = lint(&repo(), &files);
    assert!(ok && findings.trim().is_empty(), "actionlint:\n{findings}");
}

#[test]
fn actionlint_reports_a_broken_workflow() {
    let dir = std::env::temp_dir().join(format!("capi-lb-actionlint-{}", std::process::id()));
    let workflows = dir.join(".github/workflows");
    std::fs::create_dir_all(&workflows).unwrap();
    let broken = workflows.join("broken.yaml");
    // A job needing a job that does not exist, and an expression naming a context that does not.
    std::fs::write(
        &broken,
        "on: push\njobs:\n  a:\n    needs: no-such-job\n    runs-on: ubuntu-24.04\n    steps:\n      \
         - uses: actions/checkout@v4.2.2\n      - run: echo ${{ nothing.here }}\n",
    )
    .unwrap();
    let (ok, findings) = lint(&dir, &[broken]);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(!ok, "actionlint passed a broken workflow:\n{findings}");
    assert!(findings.contains("no-such-job"), "{findings}");
    assert!(findings.contains("nothing"), "{findings}");
}

#[test]
fn one_image_name_everywhere() {
    let image = manifests::image();
    let (repository, tag) = image.rsplit_once(':').unwrap();
    assert_eq!(repository, "ghcr.io/capi-lb/capi-lb");
    assert_eq!(tag, format!("v{}", env!("CARGO_PKG_VERSION")));

    let out = Command::new(repo().join("hack/image.sh"))
        .arg("name")
        .output()
        .expect("running hack/image.sh name");
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), image);

    let dockerfile = std::fs::read_to_string(repo().join("Dockerfile")).unwrap();
    assert!(
        dockerfile.contains(&format!("-t {image} ")),
        "the Dockerfile's build command names another image"
    );
    let release = std::fs::read_to_string(repo().join(".github/workflows/release.yaml")).unwrap();
    assert!(
        release.contains(&format!("IMAGE: {repository}\n")),
        "release.yaml pushes another image"
    );
    for (path, text) in manifests::files().unwrap() {
        // A container image (`image: <name>`), not a mapping of that name (an OpenStack
        // machine's `image:` filter).
        for line in text
            .lines()
            .filter(|l| l.trim_start().starts_with("image:") && !l.trim_end().ends_with(':'))
        {
            assert_eq!(
                line.trim_start(),
                format!("image: {image}"),
                "{}",
                path.display()
            );
        }
    }
}
