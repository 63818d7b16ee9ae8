//! The library's top-level modules depend on each other without a cycle:
//! leaves (durations, the environment, secrets) import nothing of the
//! product, faces and maintenance sit on the engine and the store, and only
//! `config` and `startup` gather everything. A cycle is reported with the
//! files that make each of its edges.
//!
//! The picture is read from the source text: every `crate::NAME` path (and
//! `crate::{A, B}` group) in a module's files, test code included, is an
//! edge to `NAME`; a `#[macro_export]` macro counts as the module that
//! defines it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Graph = BTreeMap<String, BTreeMap<String, BTreeSet<String>>>;

#[test]
fn the_library_modules_depend_on_each_other_without_a_cycle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let modules = library_modules(&src);
    assert!(
        modules.len() > 10,
        "lib.rs should declare the library's modules: {modules:?}"
    );
    let graph = dependencies(&src, &modules);
    let cycles = cycles(&graph);
    let described: Vec<String> = cycles.iter().map(|cycle| describe(cycle, &graph)).collect();
    assert!(
        cycles.is_empty(),
        "dependency cycles between modules:\n{}",
        described.join("\n")
    );
}

#[test]
fn the_leaf_modules_import_nothing_of_the_product() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let modules = library_modules(&src);
    let graph = dependencies(&src, &modules);
    for leaf in [
        "decimal_text",
        "duration_text",
        "environment",
        "log_text",
        "payload",
        "secret",
        "thread_shard",
        "uri_text",
    ] {
        assert!(modules.contains(leaf), "{leaf} is a module of the library");
        let edges = graph.get(leaf).map(|e| e.keys().collect::<Vec<_>>());
        assert_eq!(edges.unwrap_or_default(), Vec::<&String>::new(), "{leaf}");
    }
}

/// The modules `lib.rs` declares.
fn library_modules(src: &Path) -> BTreeSet<String> {
    let lib = std::fs::read_to_string(src.join("lib.rs")).expect("src/lib.rs");
    lib.lines()
        .filter_map(|line| {
            let line = line.trim();
            let rest = line
                .strip_prefix("pub mod ")
                .or_else(|| line.strip_prefix("mod "))?;
            Some(rest.trim_end_matches(';').trim().to_owned())
        })
        .collect()
}

/// For each module, the modules it names, with the files that name them.
fn dependencies(src: &Path, modules: &BTreeSet<String>) -> Graph {
    let files: Vec<(String, PathBuf)> = modules
        .iter()
        .flat_map(|module| {
            let mut files = Vec::new();
            let file = src.join(format!("{module}.rs"));
            if file.is_file() {
                files.push((module.clone(), file));
            }
            rust_files(&src.join(module), &mut |path| {
                files.push((module.clone(), path))
            });
            files
        })
        .collect();
    let texts: Vec<(String, PathBuf, String)> = files
        .into_iter()
        .map(|(module, path)| {
            let text = without_comments(&std::fs::read_to_string(&path).expect("readable source"));
            (module, path, text)
        })
        .collect();
    let macros: BTreeMap<String, String> = texts
        .iter()
        .flat_map(|(module, _, text)| {
            exported_macros(text)
                .into_iter()
                .map(move |name| (name, module.clone()))
        })
        .collect();

    let mut graph = Graph::new();
    for (module, path, text) in &texts {
        let shown = path.strip_prefix(src).unwrap_or(path).display().to_string();
        for name in crate_paths(text) {
            let target = macros.get(&name).cloned().unwrap_or(name);
            if modules.contains(&target) && &target != module {
                graph
                    .entry(module.clone())
                    .or_default()
                    .entry(target)
                    .or_default()
                    .insert(shown.clone());
            }
        }
    }
    graph
}

fn rust_files(dir: &Path, found: &mut dyn FnMut(PathBuf)) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    for path in paths {
        if path.is_dir() {
            rust_files(&path, found);
        } else if path.extension().is_some_and(|e| e == "rs") {
            found(path);
        }
    }
}

/// The text without `//` comments (doc comments name modules in prose and
/// in examples, which are not dependencies of the module).
fn without_comments(text: &str) -> String {
    text.lines()
        .map(|line| match line.find("//") {
            Some(at) if !inside_string(&line[..at]) => &line[..at],
            _ => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Whether a `//` after `before` sits inside a string literal (a URL).
fn inside_string(before: &str) -> bool {
    before.matches('"').count() % 2 == 1
}

/// The first segment of every `crate::` path, and every name in a
/// `crate::{...}` group.
fn crate_paths(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for (at, _) in text.match_indices("crate::") {
        let preceded = text[..at]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_alphanumeric() || c == '_');
        if preceded {
            continue;
        }
        let rest = &text[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let group = &group[..group.find('}').unwrap_or(group.len())];
            names.extend(
                group
                    .split(',')
                    .filter_map(|item| first_segment(item.trim())),
            );
        } else if let Some(name) = first_segment(rest) {
            names.insert(name);
        }
    }
    names
}

fn first_segment(path: &str) -> Option<String> {
    let name: String = path
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    (!name.is_empty()).then_some(name)
}

/// The names of the `#[macro_export]` macros a file defines: they are
/// named `crate::NAME!` wherever they are used.
fn exported_macros(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut exported = false;
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with("#[macro_export]") {
            exported = true;
        } else if let Some(rest) = line.strip_prefix("macro_rules!") {
            if exported {
                names.extend(first_segment(rest.trim()));
            }
            exported = false;
        }
    }
    names
}

/// The strongly connected components with more than one module (Tarjan).
fn cycles(graph: &Graph) -> Vec<Vec<String>> {
    struct State<'a> {
        graph: &'a Graph,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        found: Vec<Vec<String>>,
    }
    fn visit<'a>(state: &mut State<'a>, node: &'a str) {
        let index = state.index.len();
        state.index.insert(node, index);
        state.low.insert(node, index);
        state.stack.push(node);
        let graph = state.graph;
        for next in graph.get(node).into_iter().flat_map(|e| e.keys()) {
            let next = next.as_str();
            if !state.index.contains_key(next) {
                visit(state, next);
                let low = state.low[node].min(state.low[next]);
                state.low.insert(node, low);
            } else if state.stack.contains(&next) {
                let low = state.low[node].min(state.index[next]);
                state.low.insert(node, low);
            }
        }
        if state.low[node] == state.index[node] {
            let mut component = Vec::new();
            while let Some(member) = state.stack.pop() {
                component.push(member.to_owned());
                if member == node {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                state.found.push(component);
            }
        }
    }
    let mut state = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        found: Vec::new(),
    };
    for node in graph.keys() {
        if !state.index.contains_key(node.as_str()) {
            visit(&mut state, node);
        }
    }
    state.found
}

fn describe(cycle: &[String], graph: &Graph) -> String {
    let mut lines = vec![format!("  {}", cycle.join(" <-> "))];
    for from in cycle {
        for (to, files) in graph.get(from).into_iter().flatten() {
            if cycle.contains(to) {
                let files: Vec<&str> = files.iter().map(String::as_str).collect();
                lines.push(format!("    {from} -> {to}: {}", files.join(", ")));
            }
        }
    }
    lines.join("\n")
}

#[test]
fn a_cycle_is_found_and_a_chain_is_not() {
    let edge = |from: &str, to: &str| {
        (
            from.to_owned(),
            BTreeMap::from([(to.to_owned(), BTreeSet::from(["f.rs".to_owned()]))]),
        )
    };
    let chain: Graph = [edge("a", "b"), edge("b", "c")].into_iter().collect();
    assert!(cycles(&chain).is_empty());
    let ring: Graph = [edge("a", "b"), edge("b", "c"), edge("c", "a")]
        .into_iter()
        .collect();
    assert_eq!(cycles(&ring), [vec!["a", "b", "c"]]);
    assert!(describe(&cycles(&ring)[0], &ring).contains("c -> a: f.rs"));
}

#[test]
fn paths_groups_and_macros_are_read_but_comments_are_not() {
    let text = without_comments(
        "use crate::{engine::Engine, store};\n// crate::admin\nlet x = crate::with_conn!(c);\nlet u = \"http://crate::no\";\n",
    );
    let names = crate_paths(&text);
    assert!(names.contains("engine") && names.contains("store"));
    assert!(names.contains("with_conn"));
    assert!(!names.contains("admin"));
    assert_eq!(
        exported_macros("#[macro_export]\nmacro_rules! with_conn {"),
        ["with_conn"]
    );
}
