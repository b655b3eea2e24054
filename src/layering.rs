//! The layering check (issue 37): the crate's top-level modules form a one-way stack, and an
//! import that runs up it fails the test command.
//!
//! The stack is the table between the `layers` markers in DESIGN.md, so the map a newcomer
//! reads is the one the code is held to. The check walks the module tree from `src/lib.rs` the
//! way the compiler does (`mod x;` to `x.rs` or `x/mod.rs`), leaves out what only tests compile
//! (`#[cfg(test)]` items and modules), and collects every `crate::<module>` path: in `use`
//! trees, in paths, and inside macro invocations (token streams the parser does not look into).
//! A module may import its own layer's modules or lower ones; the graph of its own layer must
//! still have no circle. Comments and doc links are not imports and are not read.
//!
//! A workspace of crates would make the compiler refuse the same thing, but the stack is still
//! moving (issue 37 takes it one step at a time) and 16 crates would cost every build and
//! every `pub(crate)`; a test over the paths gives the same guarantee at the granularity of
//! top-level modules with none of that.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use syn::visit::Visit;

/// Imports that still run up the stack, each a debt of issue 37 with where it comes from.
/// The check fails when one of them is gone, so this list only shrinks: delete the line.
const KNOWN_UPWARD: &[(&str, &str)] = &[
    ("cm", "node"),
    ("config", "pod"),
    ("metrics", "stats"),
    ("metrics", "volume"),
    ("pod", "node"),
    ("pod", "source"),
    ("volume", "pod"),
];

/// Imports within one layer that close a circle there, with the same rule as above.
const KNOWN_CIRCLES: &[(&str, &str)] = &[
    ("csi", "volume"),
    ("volume", "csi"),
    ("eviction", "pod"),
    ("pod", "eviction"),
];

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The layers as DESIGN.md lists them, bottom first: each row's number and the modules named
/// in backticks in its second column.
fn layers_from_design(text: &str) -> BTreeMap<String, u32> {
    let start = text
        .find("<!-- layers -->")
        .expect("DESIGN.md has the layer table between <!-- layers --> and <!-- /layers -->");
    let end = text[start..]
        .find("<!-- /layers -->")
        .map(|e| start + e)
        .expect("DESIGN.md's layer table ends with <!-- /layers -->");
    let mut layers = BTreeMap::new();
    for row in text[start..end].lines() {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        // "| 3 os | `cgroups`, ... | ..." splits into ["", "3 os", "`cgroups`, ...", ...].
        let Some(number) = cells
            .get(1)
            .and_then(|c| c.split_whitespace().next())
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let modules = cells.get(2).copied().unwrap_or_default();
        for name in modules.split('`').skip(1).step_by(2) {
            let before = layers.insert(name.to_string(), number);
            assert!(before.is_none(), "DESIGN.md puts `{name}` in two layers");
        }
    }
    layers
}

fn is_cfg_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg")
            && a.parse_args::<syn::Meta>()
                .is_ok_and(|m| m.path().is_ident("test"))
    })
}

fn item_attrs(item: &syn::Item) -> &[syn::Attribute] {
    use syn::Item;
    match item {
        Item::Const(i) => &i.attrs,
        Item::Enum(i) => &i.attrs,
        Item::ExternCrate(i) => &i.attrs,
        Item::Fn(i) => &i.attrs,
        Item::ForeignMod(i) => &i.attrs,
        Item::Impl(i) => &i.attrs,
        Item::Macro(i) => &i.attrs,
        Item::Mod(i) => &i.attrs,
        Item::Static(i) => &i.attrs,
        Item::Struct(i) => &i.attrs,
        Item::Trait(i) => &i.attrs,
        Item::TraitAlias(i) => &i.attrs,
        Item::Type(i) => &i.attrs,
        Item::Union(i) => &i.attrs,
        Item::Use(i) => &i.attrs,
        _ => &[],
    }
}

/// The top-level modules one file names through `crate::`, and the files its `mod x;` lines
/// bring in (cfg(test) ones left out).
#[derive(Default)]
struct FileUses {
    modules: BTreeSet<String>,
    /// Inline `mod a { mod b; }` nesting, for where `b`'s file is.
    inline: Vec<String>,
    child_paths: Vec<Vec<String>>,
}

impl FileUses {
    fn use_tree(&mut self, tree: &syn::UseTree) {
        match tree {
            syn::UseTree::Path(p) => {
                self.modules.insert(p.ident.to_string());
            }
            syn::UseTree::Name(n) => {
                self.modules.insert(n.ident.to_string());
            }
            syn::UseTree::Rename(r) => {
                self.modules.insert(r.ident.to_string());
            }
            syn::UseTree::Group(g) => g.items.iter().for_each(|t| self.use_tree(t)),
            syn::UseTree::Glob(_) => {}
        }
    }

    fn tokens(&mut self, tokens: proc_macro2::TokenStream) {
        let trees: Vec<_> = tokens.into_iter().collect();
        for (i, tree) in trees.iter().enumerate() {
            match tree {
                proc_macro2::TokenTree::Group(g) => self.tokens(g.stream()),
                proc_macro2::TokenTree::Ident(id) if id == "crate" => {
                    // `crate :: name`: two ':' puncts, then the module.
                    if let (
                        Some(proc_macro2::TokenTree::Punct(a)),
                        Some(proc_macro2::TokenTree::Punct(b)),
                        Some(proc_macro2::TokenTree::Ident(name)),
                    ) = (trees.get(i + 1), trees.get(i + 2), trees.get(i + 3))
                    {
                        if a.as_char() == ':' && b.as_char() == ':' {
                            self.modules.insert(name.to_string());
                        }
                    }
                }
                _ => {}
            }
        }
    }
}

impl<'ast> Visit<'ast> for FileUses {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        if is_cfg_test(item_attrs(item)) {
            return;
        }
        syn::visit::visit_item(self, item);
    }

    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        match &m.content {
            None => {
                let mut path = self.inline.clone();
                path.push(m.ident.to_string());
                self.child_paths.push(path);
            }
            Some(_) => {
                self.inline.push(m.ident.to_string());
                syn::visit::visit_item_mod(self, m);
                self.inline.pop();
            }
        }
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        if let syn::UseTree::Path(p) = &u.tree {
            if p.ident == "crate" {
                self.use_tree(&p.tree);
            }
        }
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        let mut segments = path.segments.iter();
        if let (Some(first), Some(second)) = (segments.next(), segments.next()) {
            if first.ident == "crate" {
                self.modules.insert(second.ident.to_string());
            }
        }
        syn::visit::visit_path(self, path);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        self.tokens(mac.tokens.clone());
        syn::visit::visit_macro(self, mac);
    }
}

/// Where the compiler looks for `mod name;` declared in `file` (inside inline modules `inline`).
fn child_file(file: &Path, inline: &[String]) -> PathBuf {
    let dir = file.parent().expect("a source file has a folder");
    let stem = file
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or_default();
    let mut base = if matches!(stem, "lib" | "main" | "mod") {
        dir.to_path_buf()
    } else {
        dir.join(stem)
    };
    for name in inline {
        base.push(name);
    }
    base
}

/// Every non-test file of the library with the top-level module it belongs to and the
/// top-level modules it names.
fn crate_imports() -> Vec<(PathBuf, String, BTreeSet<String>)> {
    let src = src_dir();
    let mut out = Vec::new();
    // (file, top-level module it belongs to; None for lib.rs itself)
    let mut queue: Vec<(PathBuf, Option<String>)> = vec![(src.join("lib.rs"), None)];
    while let Some((file, top)) = queue.pop() {
        let text = std::fs::read_to_string(&file)
            .unwrap_or_else(|e| panic!("reading {}: {e}", file.display()));
        let parsed =
            syn::parse_file(&text).unwrap_or_else(|e| panic!("parsing {}: {e}", file.display()));
        let mut uses = FileUses::default();
        uses.visit_file(&parsed);
        for path in &uses.child_paths {
            let (inline, name) = path.split_at(path.len() - 1);
            let base = child_file(&file, inline);
            let flat = base.join(format!("{}.rs", name[0]));
            let nested = base.join(&name[0]).join("mod.rs");
            let child = if flat.exists() { flat } else { nested };
            assert!(
                child.exists(),
                "{}: `mod {};` has no file",
                file.display(),
                name[0]
            );
            let child_top = top.clone().unwrap_or_else(|| name[0].clone());
            queue.push((child, Some(child_top)));
        }
        if let Some(top) = top {
            out.push((file, top, uses.modules));
        }
    }
    out
}

/// The top-level module graph: module → (module it imports → files that do).
fn module_graph(layers: &BTreeMap<String, u32>) -> Graph {
    let src = src_dir();
    let mut graph = Graph::new();
    for (file, top, named) in crate_imports() {
        for target in named {
            // `crate::Name` for an item lib.rs re-exports, or a macro's own `crate` path, is
            // not a module of the table.
            if target == top || !layers.contains_key(&target) {
                continue;
            }
            let shown = file
                .strip_prefix(&src)
                .unwrap_or(&file)
                .display()
                .to_string();
            graph
                .entry(top.clone())
                .or_default()
                .entry(target)
                .or_default()
                .insert(shown);
        }
    }
    graph
}

/// A circle through `from` among `edges` (depth-first), if there is one.
fn circle_through(from: &str, edges: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn walk(
        at: &str,
        goal: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        seen: &mut BTreeSet<String>,
    ) -> bool {
        for next in edges.get(at).into_iter().flatten() {
            if next == goal {
                return true;
            }
            if seen.insert(next.clone()) {
                path.push(next.clone());
                if walk(next, goal, edges, path, seen) {
                    return true;
                }
                path.pop();
            }
        }
        false
    }
    let mut path = vec![from.to_string()];
    walk(from, from, edges, &mut path, &mut BTreeSet::new()).then_some(path)
}

fn design_layers() -> BTreeMap<String, u32> {
    let design = Path::new(env!("CARGO_MANIFEST_DIR")).join("DESIGN.md");
    let text = std::fs::read_to_string(&design)
        .unwrap_or_else(|e| panic!("reading {}: {e}", design.display()));
    layers_from_design(&text)
}

#[test]
fn every_module_of_the_crate_has_a_layer_in_design_md() {
    let layers = design_layers();
    let mut in_src = BTreeSet::new();
    for entry in std::fs::read_dir(src_dir()).expect("src/ lists") {
        let path = entry.expect("src/ entry").path();
        let name = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default();
        let is_module = path.is_dir() || path.extension().is_some_and(|e| e == "rs");
        // The roots and what only tests compile are no layer's.
        if is_module && !matches!(name, "lib" | "main" | "test_support" | "layering") {
            in_src.insert(name.to_string());
        }
    }
    let in_table: BTreeSet<String> = layers.keys().cloned().collect();
    let missing: Vec<_> = in_src.difference(&in_table).collect();
    let stale: Vec<_> = in_table.difference(&in_src).collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "DESIGN.md's layer table and src/ differ: modules without a layer {missing:?}, \
         layers naming no module {stale:?}"
    );
}

type Graph = BTreeMap<String, BTreeMap<String, BTreeSet<String>>>;

/// What is wrong with `graph` against `layers`: upward imports and circles within a layer not
/// in the known lists, and known ones that are gone.
fn layering_problems(
    graph: &Graph,
    layers: &BTreeMap<String, u32>,
    known_upward: &[(&str, &str)],
    known_circles: &[(&str, &str)],
) -> Vec<String> {
    let pairs = |list: &[(&str, &str)]| -> BTreeSet<(String, String)> {
        list.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    };
    let (known_up, known_circle) = (pairs(known_upward), pairs(known_circles));
    let mut problems = Vec::new();
    let mut up_seen = BTreeSet::new();
    // Same-layer edges, for the circle check (known ones left out).
    let mut level: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut circle_seen = BTreeSet::new();
    for (from, targets) in graph {
        for (to, files) in targets {
            let pair = (from.clone(), to.clone());
            match layers[from].cmp(&layers[to]) {
                std::cmp::Ordering::Less => {
                    if known_up.contains(&pair) {
                        up_seen.insert(pair);
                    } else {
                        problems.push(format!(
                            "`{from}` (layer {}) imports `{to}` (layer {}, above it) in {}",
                            layers[from],
                            layers[to],
                            files.iter().cloned().collect::<Vec<_>>().join(", ")
                        ));
                    }
                }
                std::cmp::Ordering::Equal => {
                    if known_circle.contains(&pair) {
                        circle_seen.insert(pair);
                    } else {
                        level.entry(from.clone()).or_default().insert(to.clone());
                    }
                }
                std::cmp::Ordering::Greater => {}
            }
        }
    }
    for from in level.keys() {
        if let Some(circle) = circle_through(from, &level) {
            problems.push(format!(
                "a circle in layer {}: {} -> {from}",
                layers[from],
                circle.join(" -> ")
            ));
        }
    }
    for pair in known_up.difference(&up_seen) {
        problems.push(format!(
            "`{}` no longer imports `{}`: take it out of KNOWN_UPWARD in src/layering.rs",
            pair.0, pair.1
        ));
    }
    for pair in known_circle.difference(&circle_seen) {
        problems.push(format!(
            "`{}` no longer imports `{}`: take it out of KNOWN_CIRCLES in src/layering.rs",
            pair.0, pair.1
        ));
    }
    problems
}

#[test]
fn no_module_imports_one_above_it_or_closes_a_circle_in_its_layer() {
    let layers = design_layers();
    let problems = layering_problems(&module_graph(&layers), &layers, KNOWN_UPWARD, KNOWN_CIRCLES);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn an_upward_import_a_circle_and_a_paid_debt_are_each_reported() {
    let layers: BTreeMap<String, u32> = [("low", 1), ("a", 2), ("b", 2), ("high", 3)]
        .into_iter()
        .map(|(m, l)| (m.to_string(), l))
        .collect();
    fn edge(graph: &mut Graph, from: &str, to: &str) {
        graph
            .entry(from.to_string())
            .or_default()
            .entry(to.to_string())
            .or_default()
            .insert(format!("{from}/mod.rs"));
    }
    let mut graph = Graph::new();
    edge(&mut graph, "high", "a");
    edge(&mut graph, "a", "low");
    assert!(layering_problems(&graph, &layers, &[], &[]).is_empty());
    edge(&mut graph, "low", "high");
    edge(&mut graph, "a", "b");
    edge(&mut graph, "b", "a");
    let problems = layering_problems(&graph, &layers, &[("a", "high")], &[]);
    assert_eq!(
        problems,
        [
            "`low` (layer 1) imports `high` (layer 3, above it) in low/mod.rs",
            "a circle in layer 2: a -> b -> a",
            "a circle in layer 2: b -> a -> b",
            "`a` no longer imports `high`: take it out of KNOWN_UPWARD in src/layering.rs",
        ]
    );
    let known = layering_problems(&graph, &layers, &[("low", "high")], &[("b", "a")]);
    assert!(known.is_empty(), "{known:?}");
}

#[test]
fn the_walk_sees_imports_in_use_trees_paths_and_macros_but_not_tests_or_comments() {
    let text = r#"
        //! [`crate::server`] is a doc link, not an import.
        use crate::{quantity::Quantity, config::{self, Config}};
        use crate::runtime as rt;
        fn f() -> crate::stats::Snapshot { tracing::info!(x = ?crate::node::NAME); todo!() }
        #[cfg(test)]
        mod tests { use crate::volume::Fake; }
        #[cfg(test)]
        use crate::pod::Pod;
        mod child;
        mod inline { mod nested; }
    "#;
    let mut uses = FileUses::default();
    uses.visit_file(&syn::parse_file(text).expect("parses"));
    let named: Vec<_> = uses.modules.iter().map(String::as_str).collect();
    assert_eq!(named, ["config", "node", "quantity", "runtime", "stats"]);
    assert_eq!(
        uses.child_paths,
        [
            vec!["child".to_string()],
            vec!["inline".into(), "nested".into()]
        ]
    );
    assert_eq!(
        child_file(Path::new("/s/pod/worker.rs"), &["inline".into()]),
        Path::new("/s/pod/worker/inline")
    );
    assert_eq!(
        child_file(Path::new("/s/pod/mod.rs"), &[]),
        Path::new("/s/pod")
    );
}

#[test]
fn the_design_table_parser_reads_numbers_and_backticked_modules() {
    let text = "x\n<!-- layers -->\n| layer | modules | owns |\n|---|---|---|\n\
                | 1 vocabulary | `quantity`, `yaml` | amounts |\n| 2 os | `cgroups` | the \
                `kernel` |\n<!-- /layers -->\n| 9 | `after` |";
    let layers = layers_from_design(text);
    assert_eq!(
        layers.into_iter().collect::<Vec<_>>(),
        [
            ("cgroups".to_string(), 2),
            ("quantity".to_string(), 1),
            ("yaml".to_string(), 1)
        ]
    );
}
