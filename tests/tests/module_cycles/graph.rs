//! The graph of file-modules of one crate, and its import cycles.
//!
//! A crate's module tree is read from its root (`lib.rs`, `main.rs`, `bin/x.rs`) by
//! following `mod x;` declarations to files (`x.rs` or `x/mod.rs`, or a `#[path]`); inline
//! `mod x { .. }` blocks belong to the file that holds them. Every path in a file
//! (`use` trees, paths in code and types, and paths inside macro arguments that parse as
//! expressions) is resolved from the module it appears in: `crate::`, `self::`, `super::`,
//! a child module's name, or a name brought in by a `use` of the same file. The resolved
//! path is cut to the deepest module that is a file, and that file is the edge's target.
//!
//! An inline `#[cfg(test)] mod` is left out: nothing imports a unit-test module, so what it
//! imports cannot close a cycle of the crate's own code.
//!
//! An ancestor's edges into its own subtree (a `mod.rs` composing or re-exporting its
//! submodules) are the hierarchy and do not count; every other edge does, child → parent
//! included. A strongly connected component of more than one file is a cycle.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::path::{Path, PathBuf};

use syn::visit::Visit;

/// Why a crate could not be read.
#[derive(Debug)]
pub struct ReadError(pub String);

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

type ModPath = Vec<String>;

/// Where an edge comes from in the source: the first path that made it.
#[derive(Clone, Debug)]
pub struct Site {
    pub line: usize,
    pub text: String,
}

/// One crate target's file-module graph.
#[derive(Debug, Default)]
pub struct Graph {
    /// Files, by index; paths relative to the directory given to [`crate_graphs`].
    pub files: Vec<PathBuf>,
    /// The module path of each file (empty for the root).
    pub file_mod: Vec<ModPath>,
    /// Edges that count: (from, to) → the first site.
    pub edges: BTreeMap<(usize, usize), Site>,
}

/// A cycle: its files, and one closed path through them with the site of each edge.
#[derive(Debug)]
pub struct Cycle {
    pub files: Vec<PathBuf>,
    pub path: Vec<(PathBuf, PathBuf, Site)>,
    /// every edge between the cycle's files
    pub edges: Vec<(PathBuf, PathBuf, Site)>,
}

impl std::fmt::Display for Cycle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "import cycle of {} files:", self.files.len())?;
        for file in &self.files {
            writeln!(f, "    {}", file.display())?;
        }
        writeln!(f, "  closed by:")?;
        for (from, to, site) in &self.path {
            writeln!(
                f,
                "    {} -> {}   ({}:{}: {})",
                from.display(),
                to.display(),
                from.display(),
                site.line,
                site.text
            )?;
        }
        Ok(())
    }
}

/// The roots of every target of the crate in `dir` (a directory holding `src/`).
pub fn crate_roots(dir: &Path) -> Vec<PathBuf> {
    let src = dir.join("src");
    let mut roots = Vec::new();
    for name in ["lib.rs", "main.rs"] {
        if src.join(name).is_file() {
            roots.push(src.join(name));
        }
    }
    if let Ok(entries) = std::fs::read_dir(src.join("bin")) {
        let mut bins: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter_map(|p| {
                if p.extension().is_some_and(|e| e == "rs") {
                    Some(p)
                } else if p.join("main.rs").is_file() {
                    Some(p.join("main.rs"))
                } else {
                    None
                }
            })
            .collect();
        bins.sort();
        roots.extend(bins);
    }
    roots
}

/// The cycles of every target of the crate in `dir`.
pub fn crate_cycles(dir: &Path) -> Result<Vec<Cycle>, ReadError> {
    let mut cycles = Vec::new();
    for root in crate_roots(dir) {
        let graph = build(dir, &root)?;
        cycles.extend(graph.cycles());
    }
    Ok(cycles)
}

struct ParsedFile {
    rel: PathBuf,
    ast: syn::File,
}

/// Builds the graph of the target whose root file is `root`; file names are shown
/// relative to `base`.
pub fn build(base: &Path, root: &Path) -> Result<Graph, ReadError> {
    let mut files: Vec<ParsedFile> = Vec::new();
    let mut file_mod: Vec<ModPath> = Vec::new();
    // every module (inline ones too) → the file that holds it
    let mut modules: HashMap<ModPath, usize> = HashMap::new();
    let mut queue = VecDeque::from([(root.to_path_buf(), ModPath::new(), true)]);
    while let Some((path, mod_path, owns_dir)) = queue.pop_front() {
        let text = std::fs::read_to_string(&path)
            .map_err(|e| ReadError(format!("{}: {e}", path.display())))?;
        let ast =
            syn::parse_file(&text).map_err(|e| ReadError(format!("{}: {e}", path.display())))?;
        let idx = files.len();
        // the directory that holds this file's child modules
        let dir = if owns_dir {
            path.parent().map(Path::to_path_buf).unwrap_or_default()
        } else {
            let stem = path
                .file_stem()
                .map(|s| s.to_os_string())
                .unwrap_or_default();
            path.parent().map(|p| p.join(stem)).unwrap_or_default()
        };
        modules.insert(mod_path.clone(), idx);
        collect_mods(&ast.items, &dir, &mod_path, idx, &mut modules, &mut queue)?;
        let rel = path.strip_prefix(base).unwrap_or(&path).to_path_buf();
        files.push(ParsedFile { rel, ast });
        file_mod.push(mod_path);
    }

    let mut graph = Graph {
        files: files.iter().map(|f| f.rel.clone()).collect(),
        file_mod,
        edges: BTreeMap::new(),
    };
    for (idx, file) in files.iter().enumerate() {
        let mut visitor = PathVisitor {
            scope: graph.file_mod[idx].clone(),
            modules: &modules,
            aliases: HashMap::new(),
            found: Vec::new(),
        };
        // aliases first (a `use` may come after the code that relies on it)
        visitor.collect_aliases(&file.ast.items);
        visitor.visit_file(&file.ast);
        for (target, site) in visitor.found {
            let Some(to) = deepest_file(&modules, &target) else {
                continue;
            };
            if to == idx || is_ancestor(&graph.file_mod[idx], &graph.file_mod[to]) {
                continue;
            }
            graph.edges.entry((idx, to)).or_insert(site);
        }
    }
    Ok(graph)
}

fn collect_mods(
    items: &[syn::Item],
    dir: &Path,
    parent: &ModPath,
    file: usize,
    modules: &mut HashMap<ModPath, usize>,
    queue: &mut VecDeque<(PathBuf, ModPath, bool)>,
) -> Result<(), ReadError> {
    for item in items {
        let syn::Item::Mod(m) = item else { continue };
        let name = m.ident.to_string();
        let mut mod_path = parent.clone();
        mod_path.push(name.clone());
        match &m.content {
            Some((_, inner)) => {
                modules.insert(mod_path.clone(), file);
                collect_mods(inner, &dir.join(&name), &mod_path, file, modules, queue)?;
            }
            None => {
                let explicit = m.attrs.iter().find_map(|a| {
                    let syn::Meta::NameValue(nv) = &a.meta else {
                        return None;
                    };
                    if !nv.path.is_ident("path") {
                        return None;
                    }
                    match &nv.value {
                        syn::Expr::Lit(syn::ExprLit {
                            lit: syn::Lit::Str(s),
                            ..
                        }) => Some(s.value()),
                        _ => None,
                    }
                });
                let (path, owns_dir) = if let Some(p) = explicit {
                    (dir.join(p), false)
                } else if dir.join(format!("{name}.rs")).is_file() {
                    (dir.join(format!("{name}.rs")), false)
                } else if dir.join(&name).join("mod.rs").is_file() {
                    (dir.join(&name).join("mod.rs"), true)
                } else {
                    return Err(ReadError(format!(
                        "module {} not found in {}",
                        mod_path.join("::"),
                        dir.display()
                    )));
                };
                queue.push_back((path, mod_path, owns_dir));
            }
        }
    }
    Ok(())
}

/// The file of the deepest module on `path` (the crate root at least).
fn deepest_file(modules: &HashMap<ModPath, usize>, path: &[String]) -> Option<usize> {
    (0..=path.len())
        .rev()
        .find_map(|n| modules.get(&path[..n].to_vec()).copied())
}

/// Whether `a` is a strict ancestor of `b` in the module tree.
fn is_ancestor(a: &ModPath, b: &ModPath) -> bool {
    a.len() < b.len() && b[..a.len()] == a[..]
}

struct PathVisitor<'a> {
    /// the module the visitor is in (a file's module, or an inline module inside it)
    scope: ModPath,
    modules: &'a HashMap<ModPath, usize>,
    /// names brought in by `use` in this file, by the scope they are in
    aliases: HashMap<(ModPath, String), ModPath>,
    found: Vec<(ModPath, Site)>,
}

impl PathVisitor<'_> {
    fn collect_aliases(&mut self, items: &[syn::Item]) {
        for item in items {
            match item {
                syn::Item::Use(u) => {
                    let mut out = Vec::new();
                    flatten_use(&u.tree, Vec::new(), &mut out);
                    for (segments, alias) in out {
                        if let (Some(alias), Some(abs)) = (alias, self.resolve(&segments)) {
                            self.aliases.insert((self.scope.clone(), alias), abs);
                        }
                    }
                }
                syn::Item::Mod(m) => {
                    if let Some((_, inner)) = &m.content {
                        self.scope.push(m.ident.to_string());
                        self.collect_aliases(inner);
                        self.scope.pop();
                    }
                }
                _ => {}
            }
        }
    }

    /// The absolute module path `segments` names from the current scope, if it is
    /// inside this crate.
    fn resolve(&self, segments: &[String]) -> Option<ModPath> {
        let first = segments.first()?;
        let mut abs: ModPath;
        let mut rest = &segments[1..];
        match first.as_str() {
            "crate" => abs = Vec::new(),
            "self" => abs = self.scope.clone(),
            "super" => {
                abs = self.scope.clone();
                abs.pop()?;
                while rest.first().is_some_and(|s| s == "super") {
                    abs.pop()?;
                    rest = &rest[1..];
                }
            }
            name => {
                let mut child = self.scope.clone();
                child.push(name.to_string());
                if self.modules.contains_key(&child) {
                    abs = child;
                } else if let Some(target) = self.alias(name) {
                    abs = target;
                } else {
                    return None;
                }
            }
        }
        abs.extend(rest.iter().cloned());
        Some(abs)
    }

    /// A `use` alias visible from the current scope (this scope or an enclosing inline
    /// module of the same file is close enough for a dependency graph).
    fn alias(&self, name: &str) -> Option<ModPath> {
        let mut scope = self.scope.clone();
        loop {
            if let Some(t) = self.aliases.get(&(scope.clone(), name.to_string())) {
                return Some(t.clone());
            }
            scope.pop()?;
        }
    }

    fn record(&mut self, segments: &[String], line: usize) {
        if segments.len() < 2
            && !matches!(
                segments.first().map(String::as_str),
                Some("self" | "super" | "crate")
            )
        {
            // a single name: a local item, or one brought in by a `use` (already an edge)
            return;
        }
        if let Some(abs) = self.resolve(segments) {
            self.found.push((
                abs,
                Site {
                    line,
                    text: segments.join("::"),
                },
            ));
        }
    }
}

/// Every leaf of a use tree: its full path, and the name it binds (None for a glob).
fn flatten_use(
    tree: &syn::UseTree,
    prefix: Vec<String>,
    out: &mut Vec<(Vec<String>, Option<String>)>,
) {
    match tree {
        syn::UseTree::Path(p) => {
            let mut prefix = prefix;
            prefix.push(p.ident.to_string());
            flatten_use(&p.tree, prefix, out);
        }
        syn::UseTree::Name(n) => {
            let name = n.ident.to_string();
            if name == "self" {
                let alias = prefix.last().cloned();
                out.push((prefix, alias));
            } else {
                let mut full = prefix;
                full.push(name.clone());
                out.push((full, Some(name)));
            }
        }
        syn::UseTree::Rename(r) => {
            let mut full = prefix;
            let name = r.ident.to_string();
            if name != "self" {
                full.push(name);
            }
            out.push((full, Some(r.rename.to_string())));
        }
        syn::UseTree::Glob(_) => out.push((prefix, None)),
        syn::UseTree::Group(g) => {
            for t in &g.items {
                flatten_use(t, prefix.clone(), out);
            }
        }
    }
}

/// `#[cfg(test)]` exactly (not `cfg(any(test, …))`, which ships outside tests too).
fn is_cfg_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg") && a.parse_args::<syn::Ident>().is_ok_and(|i| i == "test")
    })
}

impl<'ast> Visit<'ast> for PathVisitor<'_> {
    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        if is_cfg_test(&m.attrs) {
            // an inline unit-test module: nothing imports it, so its own imports (a test
            // may use any module of its crate) cannot close a cycle of the crate's code
            return;
        }
        if let Some((_, inner)) = &m.content {
            self.scope.push(m.ident.to_string());
            for item in inner {
                self.visit_item(item);
            }
            self.scope.pop();
        }
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        let line = u.use_token.span.start().line;
        let mut out = Vec::new();
        flatten_use(&u.tree, Vec::new(), &mut out);
        // `use x::Name` names an item of module x (or module x itself)
        for (segments, _) in out {
            if let Some(abs) = self.resolve(&segments) {
                self.found.push((
                    abs,
                    Site {
                        line,
                        text: format!("use {}", segments.join("::")),
                    },
                ));
            }
        }
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        let segments: Vec<String> = p.segments.iter().map(|s| s.ident.to_string()).collect();
        let line = p
            .segments
            .first()
            .map(|s| s.ident.span().start().line)
            .unwrap_or(0);
        self.record(&segments, line);
        syn::visit::visit_path(self, p);
    }

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        // arguments of format!, vec!, assert!, tracing's macros...: expressions
        use syn::parse::Parser;
        let parser = syn::punctuated::Punctuated::<syn::Expr, syn::Token![,]>::parse_terminated;
        if let Ok(exprs) = parser.parse2(m.tokens.clone()) {
            for e in &exprs {
                self.visit_expr(e);
            }
        } else {
            // `name = expr` fields of tracing macros, `matches!(x, Pat)`, ...: look for
            // `crate`/`self`/`super` paths in the raw tokens
            let tokens: Vec<proc_macro2::TokenTree> = flat_tokens(m.tokens.clone());
            let mut i = 0;
            while i < tokens.len() {
                if let proc_macro2::TokenTree::Ident(id) = &tokens[i] {
                    let s = id.to_string();
                    if s == "crate" || s == "super" || s == "self" {
                        let line = id.span().start().line;
                        let mut segs = vec![s];
                        let mut j = i + 1;
                        while is_colon(tokens.get(j)) && is_colon(tokens.get(j + 1)) {
                            match tokens.get(j + 2) {
                                Some(proc_macro2::TokenTree::Ident(n)) => {
                                    segs.push(n.to_string());
                                    j += 3;
                                }
                                _ => break,
                            }
                        }
                        self.record(&segs, line);
                        i = j;
                        continue;
                    }
                }
                i += 1;
            }
        }
        syn::visit::visit_macro(self, m);
    }
}

fn is_colon(t: Option<&proc_macro2::TokenTree>) -> bool {
    matches!(t, Some(proc_macro2::TokenTree::Punct(p)) if p.as_char() == ':')
}

fn flat_tokens(ts: proc_macro2::TokenStream) -> Vec<proc_macro2::TokenTree> {
    let mut out = Vec::new();
    for t in ts {
        match t {
            proc_macro2::TokenTree::Group(g) => out.extend(flat_tokens(g.stream())),
            other => out.push(other),
        }
    }
    out
}

impl Graph {
    /// The strongly connected components of more than one file, each with one closed path.
    pub fn cycles(&self) -> Vec<Cycle> {
        let n = self.files.len();
        let mut adj: Vec<Vec<usize>> = vec![Vec::new(); n];
        for &(a, b) in self.edges.keys() {
            adj[a].push(b);
        }
        let sccs = tarjan(&adj);
        let mut cycles = Vec::new();
        for scc in sccs.into_iter().filter(|c| c.len() > 1) {
            let members: BTreeSet<usize> = scc.iter().copied().collect();
            let start = *members.iter().next().unwrap_or(&0);
            let path = self.closed_path(start, &members, &adj);
            let mut files: Vec<PathBuf> = members.iter().map(|&i| self.files[i].clone()).collect();
            files.sort();
            let edges = self
                .edges
                .iter()
                .filter(|((a, b), _)| members.contains(a) && members.contains(b))
                .map(|((a, b), site)| {
                    (self.files[*a].clone(), self.files[*b].clone(), site.clone())
                })
                .collect();
            cycles.push(Cycle {
                files,
                edges,
                path: path
                    .into_iter()
                    .map(|(a, b)| {
                        let site = self.edges[&(a, b)].clone();
                        (self.files[a].clone(), self.files[b].clone(), site)
                    })
                    .collect(),
            });
        }
        cycles
    }

    /// The shortest path start → … → start inside `members` (BFS).
    fn closed_path(
        &self,
        start: usize,
        members: &BTreeSet<usize>,
        adj: &[Vec<usize>],
    ) -> Vec<(usize, usize)> {
        let mut prev: HashMap<usize, usize> = HashMap::new();
        let mut queue = VecDeque::from([start]);
        while let Some(u) = queue.pop_front() {
            for &v in &adj[u] {
                if !members.contains(&v) {
                    continue;
                }
                if v == start {
                    let mut path = vec![(u, start)];
                    let mut cur = u;
                    while cur != start {
                        let p = prev[&cur];
                        path.push((p, cur));
                        cur = p;
                    }
                    path.reverse();
                    return path;
                }
                if let std::collections::hash_map::Entry::Vacant(e) = prev.entry(v) {
                    e.insert(u);
                    queue.push_back(v);
                }
            }
        }
        Vec::new()
    }
}

/// Tarjan's strongly connected components (iterative).
fn tarjan(adj: &[Vec<usize>]) -> Vec<Vec<usize>> {
    let n = adj.len();
    let mut index = vec![usize::MAX; n];
    let mut low = vec![0; n];
    let mut on_stack = vec![false; n];
    let mut stack = Vec::new();
    let mut next = 0;
    let mut out = Vec::new();
    for root in 0..n {
        if index[root] != usize::MAX {
            continue;
        }
        let mut call: Vec<(usize, usize)> = vec![(root, 0)];
        index[root] = next;
        low[root] = next;
        next += 1;
        stack.push(root);
        on_stack[root] = true;
        while let Some(top) = call.last_mut() {
            let v = top.0;
            if top.1 < adj[v].len() {
                let w = adj[v][top.1];
                top.1 += 1;
                if index[w] == usize::MAX {
                    index[w] = next;
                    low[w] = next;
                    next += 1;
                    stack.push(w);
                    on_stack[w] = true;
                    call.push((w, 0));
                } else if on_stack[w] {
                    low[v] = low[v].min(index[w]);
                }
            } else {
                call.pop();
                if let Some(&(parent, _)) = call.last() {
                    low[parent] = low[parent].min(low[v]);
                }
                if low[v] == index[v] {
                    let mut comp = Vec::new();
                    while let Some(w) = stack.pop() {
                        on_stack[w] = false;
                        comp.push(w);
                        if w == v {
                            break;
                        }
                    }
                    out.push(comp);
                }
            }
        }
    }
    out
}
