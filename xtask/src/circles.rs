//! The check that no files of a crate import each other in a loop (#45): within each crate,
//! the top-level modules (a file, or a folder with its files) and the `crate::` paths their
//! code names, comments and tests left out. A circle is reported with its modules; `cargo
//! xtask test` fails on one.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
};

use anyhow::{Context as _, Result, bail};

/// The crates' source folders, from the workspace root.
const CRATES: &[&str] = &[
    "tracer-common/src",
    "tracer-ebpf/src",
    "registry/src",
    "history/src",
    "policy/src",
    "lease/src",
    "report/src",
    "fleet/src",
    "allocator/src",
    "embedded/src",
    "preload/src",
    "tracer-agent/src",
    "transfer-bench/src",
    "xtask/src",
];

pub fn check(root: &Path) -> Result<()> {
    let mut found = Vec::new();
    for krate in CRATES {
        let src = root.join(krate);
        if !src.is_dir() {
            continue;
        }
        let graph = module_graph(&src)?;
        for circle in circles(&graph) {
            found.push(format!("{krate}: {}", circle.join(" -> ")));
        }
    }
    if !found.is_empty() {
        bail!(
            "modules that import each other in a loop:\n  {}",
            found.join("\n  ")
        );
    }
    Ok(())
}

/// Each top-level module of the crate at `src` and the others it names.
fn module_graph(src: &Path) -> Result<BTreeMap<String, BTreeSet<String>>> {
    let mut files: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
    for file in rust_files(src)? {
        let relative = file.strip_prefix(src).context("inside the crate")?;
        let top = relative
            .components()
            .next()
            .and_then(|c| c.as_os_str().to_str())
            .unwrap_or_default()
            .trim_end_matches(".rs")
            .to_owned();
        // The crate root and binaries name modules; test files are not part of the graph.
        let name = file
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if matches!(top.as_str(), "lib" | "main" | "bin") || name == "tests.rs" {
            continue;
        }
        files.entry(top).or_default().push(file);
    }
    let modules: BTreeSet<String> = files.keys().cloned().collect();
    let mut graph = BTreeMap::new();
    for (module, paths) in &files {
        let mut names = BTreeSet::new();
        for path in paths {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            names.extend(named_modules(&code_of(&text)));
        }
        names.retain(|name| name != module && modules.contains(name));
        graph.insert(module.clone(), names);
    }
    Ok(graph)
}

fn rust_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))? {
        let path = entry?.path();
        if path.is_dir() {
            out.extend(rust_files(&path)?);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    Ok(out)
}

/// The code of a file: comment lines and everything from its test module on left out.
fn code_of(text: &str) -> String {
    let before_tests = text.split("#[cfg(test)]").next().unwrap_or_default();
    before_tests
        .lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The first segments of the `crate::` paths in `code`: `crate::a::b`, and each path at the
/// top of a `crate::{a::x, b, c::{y, z}}` list.
fn named_modules(code: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        if let Some(list) = rest.strip_prefix('{') {
            let mut depth = 0usize;
            let mut item = String::new();
            for ch in list.chars() {
                match ch {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        names.insert(first_segment(&item));
                        item.clear();
                        continue;
                    }
                    _ => {}
                }
                if depth == 0 {
                    item.push(ch);
                }
            }
            names.insert(first_segment(&item));
        } else {
            names.insert(first_segment(rest));
        }
    }
    names.remove("");
    names
}

fn first_segment(path: &str) -> String {
    path.trim()
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect()
}

/// The strongly connected groups of more than one module (Tarjan's algorithm), each in order.
fn circles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct Walk<'a> {
        graph: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        found: Vec<Vec<String>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, module: &'a str) {
            let at = self.index.len();
            self.index.insert(module, at);
            self.low.insert(module, at);
            self.stack.push(module);
            for next in self.graph.get(module).into_iter().flatten() {
                let next = next.as_str();
                if !self.index.contains_key(next) {
                    self.visit(next);
                    let low = self.low[module].min(self.low[next]);
                    self.low.insert(module, low);
                } else if self.stack.contains(&next) {
                    let low = self.low[module].min(self.index[next]);
                    self.low.insert(module, low);
                }
            }
            if self.low[module] == self.index[module] {
                let mut group = Vec::new();
                while let Some(top) = self.stack.pop() {
                    group.push(top.to_owned());
                    if top == module {
                        break;
                    }
                }
                if group.len() > 1 {
                    group.reverse();
                    self.found.push(group);
                }
            }
        }
    }
    let mut walk = Walk {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        found: Vec::new(),
    };
    for module in graph.keys() {
        if !walk.index.contains_key(module.as_str()) {
            walk.visit(module);
        }
    }
    walk.found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loop_of_imports_is_found_and_comments_are_not_imports() {
        let code = code_of(
            "use crate::{a::X, b, c::{y, z}};\n// crate::d\nfn f() { crate::e::g(); }\n\
             #[cfg(test)]\nmod tests { use crate::h; }",
        );
        let names: Vec<_> = named_modules(&code).into_iter().collect();
        assert_eq!(names, ["a", "b", "c", "e"]);
        let graph: BTreeMap<String, BTreeSet<String>> = [
            ("a", vec!["b"]),
            ("b", vec!["c"]),
            ("c", vec!["a"]),
            ("d", vec!["a"]),
        ]
        .into_iter()
        .map(|(m, to)| (m.to_owned(), to.into_iter().map(str::to_owned).collect()))
        .collect();
        assert_eq!(circles(&graph), [["a", "b", "c"]]);
    }

    #[test]
    fn the_workspace_has_no_circle() {
        check(&crate::workspace_root()).expect("no circle");
    }
}
