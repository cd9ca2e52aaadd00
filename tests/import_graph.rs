//! The house rules that keep `src/` readable, checked on every `cargo test`: no import
//! circles between files or between top-level modules (lower folders never import higher
//! ones), no file on the request path over 450 lines, `src/api/`'s top level holding only the
//! front door, and `unsafe` allowed only in the files ARCHITECTURE.md names.
//!
//! The import check reads the source rather than asking the compiler, so that it stays fast
//! and needs no features: comments and literals are skipped, each module's items, `use`
//! trees and the paths in its code are found outside `#[cfg(test)]`, and each path is
//! resolved to the file that DEFINES the item it names. A module file that only declares
//! children and re-exports defines nothing, so it is looked through to the file behind the
//! re-export. A cycle in the file graph fails the test with the cycle printed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Folders and files whose code runs for every request (tests inside them count too).
const REQUEST_PATH: &[&str] = &[
    "api",
    "transport",
    "overload",
    "auth",
    "infer.rs",
    "request.rs",
    "batcher",
    "tensor",
    "shm",
    "backend",
    "wire_error",
];
const MAX_LINES: usize = 450;
/// `src/api/`'s top level: the front door (`hot_routes.rs` and `in_place.rs` dispatch HTTP and
/// gRPC calls to the protocols beneath); every protocol is a folder.
const API_TOP_LEVEL: &[&str] = &[
    "mod.rs",
    "hot_routes.rs",
    "in_place.rs",
    "health.rs",
    "scrape.rs",
];

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    Punct(u8),
    PathSep,
    Str(String),
}

/// Rust source as tokens, without comments, char literals or lifetimes; strings are kept
/// (as one token) because `#[path = ".."]` needs them.
fn tokens(text: &str) -> Vec<Tok> {
    let b = text.as_bytes();
    let (mut out, mut i) = (Vec::new(), 0);
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c >= 0x80;
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied().unwrap_or(0);
        if c == b'/' && next == b'/' {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if c == b'/' && next == b'*' {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                    depth += 1;
                    i += 2;
                } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if c == b'r' && (next == b'#' || next == b'"') && !prev_is_ident(b, i) {
            let hashes = b[i + 1..].iter().take_while(|&&h| h == b'#').count();
            if b.get(i + 1 + hashes) != Some(&b'"') {
                out.push(Tok::Ident("r".into()));
                i += 1;
                continue;
            }
            let body = i + 2 + hashes;
            let close = format!("\"{}", "#".repeat(hashes));
            let end = text[body..].find(&close).map_or(b.len(), |at| body + at);
            out.push(Tok::Str(text[body..end].to_owned()));
            i = end + close.len();
        } else if c == b'"' {
            let start = i + 1;
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            out.push(Tok::Str(text[start..i.min(b.len())].to_owned()));
            i += 1;
        } else if c == b'\'' {
            // A char literal ('x', '\n', '─') or a lifetime ('a): skipped either way.
            let width = text[i + 1..].chars().next().map_or(1, char::len_utf8);
            if next == b'\\' {
                i += 3; // the quote, the backslash and the escaped character
                while i < b.len() && b[i] != b'\'' {
                    i += 1;
                }
                i += 1;
            } else if b.get(i + 1 + width) == Some(&b'\'') {
                i += 2 + width;
            } else {
                i += 1;
                while i < b.len() && ident(b[i]) {
                    i += 1;
                }
            }
        } else if ident(c) {
            let start = i;
            while i < b.len() && ident(b[i]) {
                i += 1;
            }
            out.push(Tok::Ident(text[start..i].to_owned()));
        } else if c == b':' && next == b':' {
            out.push(Tok::PathSep);
            i += 2;
        } else {
            if !c.is_ascii_whitespace() {
                out.push(Tok::Punct(c));
            }
            i += 1;
        }
    }
    out
}

fn prev_is_ident(b: &[u8], i: usize) -> bool {
    i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_')
}

/// What a name in a module leads to.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Target {
    Module(usize),
    File(usize),
}

#[derive(Debug, Default)]
struct Module {
    file: usize,
    parent: Option<usize>,
    /// Where `mod child;` looks for `child.rs` or `child/mod.rs`.
    dir: PathBuf,
    children: BTreeMap<String, usize>,
    items: BTreeSet<String>,
    /// `use` bindings: the name brought in and the path it names, relative to this module.
    uses: BTreeMap<String, Vec<String>>,
    globs: Vec<Vec<String>>,
    /// Holds item-level macro invocations (`include_proto!`), whose items are unseen.
    generated: bool,
}

/// A path met in a file's code or `use` lines, with the module it is resolved in.
struct Reference {
    file: usize,
    module: usize,
    path: Vec<String>,
}

#[derive(Default)]
struct Tree {
    files: Vec<String>,
    defines: Vec<bool>,
    modules: Vec<Module>,
    references: Vec<Reference>,
}

/// A `use` tree's leaves: the path and the name it binds (`*` for a glob).
fn use_leaves(
    toks: &[Tok],
    i: &mut usize,
    prefix: Vec<String>,
    out: &mut Vec<(Vec<String>, String)>,
) {
    let mut path = prefix;
    loop {
        match toks.get(*i) {
            Some(Tok::Ident(name)) if name == "as" => {
                *i += 1;
                if let Some(Tok::Ident(alias)) = toks.get(*i) {
                    if let Some(last) = out.last_mut().filter(|l| l.0 == path) {
                        last.1 = alias.clone();
                    }
                    *i += 1;
                }
                return;
            }
            Some(Tok::Ident(name)) if name == "self" && !path.is_empty() => {
                *i += 1;
                let bound = path.last().cloned().unwrap_or_default();
                out.push((path.clone(), bound));
            }
            Some(Tok::Ident(name)) => {
                path.push(name.clone());
                *i += 1;
                if toks.get(*i) != Some(&Tok::PathSep) {
                    out.push((path.clone(), name.clone()));
                }
            }
            Some(Tok::PathSep) => *i += 1,
            Some(Tok::Punct(b'*')) => {
                *i += 1;
                out.push((path.clone(), "*".into()));
                return;
            }
            Some(Tok::Punct(b'{')) => {
                *i += 1;
                while !matches!(toks.get(*i), None | Some(Tok::Punct(b'}'))) {
                    let before = *i;
                    use_leaves(toks, i, path.clone(), out);
                    if toks.get(*i) == Some(&Tok::Punct(b',')) || *i == before {
                        *i += 1;
                    }
                }
                *i += 1;
                return;
            }
            _ => return,
        }
    }
}

/// The index just past the bracket group opening at `i`.
fn close_of(toks: &[Tok], mut i: usize) -> usize {
    let mut depth = 0usize;
    while i < toks.len() {
        match toks[i] {
            Tok::Punct(b'(' | b'[' | b'{') => depth += 1,
            Tok::Punct(b')' | b']' | b'}') => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    i
}

/// The index just past the item starting at `i` (its `;` or its closing brace).
fn item_end(toks: &[Tok], mut i: usize, ends_at_semicolon: bool) -> usize {
    let mut depth = 0usize;
    while i < toks.len() {
        match &toks[i] {
            Tok::Punct(b'(' | b'[' | b'{') => depth += 1,
            Tok::Punct(b')' | b']') => depth = depth.saturating_sub(1),
            Tok::Punct(b'}') => {
                depth = depth.saturating_sub(1);
                if depth == 0 && !ends_at_semicolon {
                    return i + 1;
                }
            }
            Tok::Punct(b';') if depth == 0 => return i + 1,
            _ => {}
        }
        i += 1;
    }
    i
}

impl Tree {
    /// Reads the crate rooted at `root` (`src/lib.rs`), following `mod` declarations.
    fn read(root: &Path, read: &dyn Fn(&Path) -> Option<String>) -> Tree {
        let mut tree = Tree::default();
        let dir = root.parent().map(Path::to_path_buf).unwrap_or_default();
        tree.modules.push(Module {
            dir,
            ..Module::default()
        });
        tree.load(root, 0, read);
        tree
    }

    fn load(&mut self, path: &Path, module: usize, read: &dyn Fn(&Path) -> Option<String>) {
        let Some(text) = read(path) else { return };
        self.files.push(path.display().to_string());
        self.defines.push(false);
        let file = self.files.len() - 1;
        self.modules[module].file = file;
        let toks = tokens(&text);
        self.items(&toks, 0, toks.len(), module, read);
    }

    /// Walks the items of `module` in `toks[i..end]`: its children, names and `use` lines,
    /// and the paths in the code of each item.
    fn items(
        &mut self,
        toks: &[Tok],
        mut i: usize,
        end: usize,
        module: usize,
        read: &dyn Fn(&Path) -> Option<String>,
    ) {
        let file = self.modules[module].file;
        while i < end {
            let (mut test, mut path_attr) = (false, None);
            let item_start = i;
            while toks[i] == Tok::Punct(b'#') {
                let open = if toks.get(i + 1) == Some(&Tok::Punct(b'!')) {
                    i + 2
                } else {
                    i + 1
                };
                let close = close_of(toks, open);
                let attr: Vec<&Tok> = toks[i..close].iter().collect();
                let words: String = attr
                    .iter()
                    .map(|t| match t {
                        Tok::Ident(s) => s.as_str(),
                        Tok::Punct(b'(') => "(",
                        Tok::Punct(b',') => ",",
                        _ => " ",
                    })
                    .collect();
                test |= words.contains("cfg(test") || words.contains("cfg(all(test");
                if words.contains("path") {
                    path_attr = attr.iter().find_map(|t| match t {
                        Tok::Str(s) => Some(s.clone()),
                        _ => None,
                    });
                }
                i = close;
                if i >= end {
                    return;
                }
            }
            let word = |at: usize| match toks.get(at) {
                Some(Tok::Ident(s)) => s.as_str(),
                _ => "",
            };
            while matches!(word(i), "pub" | "unsafe" | "async" | "extern" | "default")
                || (word(i) == "const" && matches!(word(i + 1), "fn" | "unsafe" | "async"))
                || matches!(toks.get(i), Some(Tok::Str(_)))
            {
                i += 1;
                if toks.get(i) == Some(&Tok::Punct(b'(')) {
                    i = close_of(toks, i);
                }
            }
            let start = i;
            let kind = word(i).to_owned();
            let name = word(i + 1).to_owned();
            match kind.as_str() {
                "mod" if toks.get(i + 2) == Some(&Tok::Punct(b'{')) => {
                    let close = close_of(toks, i + 2);
                    if !test {
                        let dir = self.modules[module].dir.join(&name);
                        let child = self.child(module, &name, dir);
                        self.modules[child].file = file;
                        self.items(toks, i + 3, close - 1, child, read);
                    }
                    i = close;
                    continue;
                }
                "mod" => {
                    if !test {
                        let dir = self.modules[module].dir.clone();
                        let child = self.child(module, &name, dir.join(&name));
                        let candidates = match &path_attr {
                            Some(p) => vec![self.file_dir(file).join(p)],
                            None => vec![
                                dir.join(format!("{name}.rs")),
                                dir.join(&name).join("mod.rs"),
                            ],
                        };
                        if let Some(found) = candidates.iter().find(|p| read(p).is_some()) {
                            if found.ends_with("mod.rs") || path_attr.is_some() {
                                self.modules[child].dir =
                                    found.parent().map(Path::to_path_buf).unwrap_or_default();
                            }
                            self.load(found, child, read);
                        }
                    }
                    i = item_end(toks, i, true);
                    continue;
                }
                "use" => {
                    let mut at = i + 1;
                    let mut leaves = Vec::new();
                    use_leaves(toks, &mut at, Vec::new(), &mut leaves);
                    if !test {
                        for (path, bound) in leaves {
                            self.reference(file, module, path.clone());
                            let m = &mut self.modules[module];
                            if bound == "*" {
                                m.globs.push(path);
                            } else if bound != "_" {
                                m.uses.insert(bound, path);
                            }
                        }
                    }
                    i = item_end(toks, i, true);
                    continue;
                }
                "fn" | "struct" | "enum" | "trait" | "type" | "union" | "static" | "const"
                | "macro_rules" => {
                    let name = if matches!(word(i + 1), "mut") || kind == "macro_rules" {
                        word(i + 2).to_owned()
                    } else {
                        name
                    };
                    if !test {
                        self.modules[module].items.insert(name);
                        self.defines[file] = true;
                    }
                }
                "impl" | "" => {}
                _ if toks.get(i + 1) == Some(&Tok::PathSep)
                    || toks.get(i + 1) == Some(&Tok::Punct(b'!')) =>
                {
                    self.modules[module].generated = true;
                    self.defines[file] = true;
                }
                _ => {}
            }
            let ends_at_semicolon = matches!(kind.as_str(), "const" | "static" | "type");
            i = item_end(toks, start, ends_at_semicolon).max(start + 1);
            if !test {
                self.code(toks, item_start, i, file, module);
            }
        }
    }

    /// The paths in an item's code: `crate::`/`super::`/`self::` ones, and ones through a
    /// name in scope (`params::parse` after `use super::params`); `use` inside bodies too.
    fn code(&mut self, toks: &[Tok], start: usize, end: usize, file: usize, module: usize) {
        let mut i = start;
        while i < end {
            if toks[i] == Tok::Ident("use".into()) && i > start {
                let mut at = i + 1;
                let mut leaves = Vec::new();
                use_leaves(toks, &mut at, Vec::new(), &mut leaves);
                for (path, bound) in leaves {
                    self.reference(file, module, path.clone());
                    if bound != "*" && bound != "_" {
                        self.modules[module].uses.entry(bound).or_insert(path);
                    }
                }
                i = at.max(i + 1);
                continue;
            }
            let after_sep = i > 0 && toks[i - 1] == Tok::PathSep;
            if let (Tok::Ident(first), false, Some(Tok::PathSep)) =
                (&toks[i], after_sep, toks.get(i + 1))
            {
                let mut path = vec![first.clone()];
                let mut at = i + 1;
                while let (Some(Tok::PathSep), Some(Tok::Ident(next))) =
                    (toks.get(at), toks.get(at + 1))
                {
                    path.push(next.clone());
                    at += 2;
                }
                self.reference(file, module, path);
                i = at;
                continue;
            }
            i += 1;
        }
    }

    fn reference(&mut self, file: usize, module: usize, path: Vec<String>) {
        self.references.push(Reference { file, module, path });
    }

    fn child(&mut self, parent: usize, name: &str, dir: PathBuf) -> usize {
        self.modules.push(Module {
            parent: Some(parent),
            dir,
            ..Module::default()
        });
        let id = self.modules.len() - 1;
        self.modules[parent].children.insert(name.to_owned(), id);
        id
    }

    fn file_dir(&self, file: usize) -> PathBuf {
        Path::new(&self.files[file])
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default()
    }

    /// What `path` names when written in `module`; `None` for other crates and the prelude.
    fn resolve(&self, module: usize, path: &[String], depth: usize) -> Option<Target> {
        let (first, rest) = path.split_first()?;
        let mut target = match first.as_str() {
            "crate" => Target::Module(0),
            "self" => Target::Module(module),
            "super" => Target::Module(self.modules[module].parent?),
            _ => self.lookup(module, first, depth, false)?,
        };
        for segment in rest {
            target = match target {
                Target::File(_) => return Some(target),
                Target::Module(m) if segment == "super" => Target::Module(self.modules[m].parent?),
                Target::Module(m) => self.lookup(m, segment, depth, true)?,
            };
        }
        Some(target)
    }

    /// `name` inside module `m`: a child, an item, or what a `use` there brings in.
    fn lookup(&self, m: usize, name: &str, depth: usize, inside: bool) -> Option<Target> {
        let module = &self.modules[m];
        if depth > 24 {
            return None;
        }
        if let Some(&child) = module.children.get(name) {
            return Some(Target::Module(child));
        }
        if module.items.contains(name) {
            return Some(Target::File(module.file));
        }
        if let Some(path) = module.uses.get(name) {
            return self.resolve(m, path, depth + 1);
        }
        let from_glob =
            module
                .globs
                .iter()
                .find_map(|glob| match self.resolve(m, glob, depth + 1)? {
                    Target::Module(g) if g != m => self.lookup(g, name, depth + 1, true),
                    _ => None,
                });
        // Items a macro generates are unseen: they are the module's own.
        from_glob.or((inside && module.generated).then_some(Target::File(module.file)))
    }

    /// (file, file it imports) -> the first path met that makes the edge (each edge to the
    /// file that defines what is named).
    fn imports(&self) -> BTreeMap<(usize, usize), String> {
        let mut imports = BTreeMap::new();
        for r in &self.references {
            let to = match self.resolve(r.module, &r.path, 0) {
                Some(Target::File(to)) => to,
                // `use super::*`: the module's own definitions.
                Some(Target::Module(m)) if self.modules[r.module].globs.contains(&r.path) => {
                    self.modules[m].file
                }
                _ => continue,
            };
            if to != r.file && self.defines[to] {
                imports
                    .entry((r.file, to))
                    .or_insert_with(|| r.path.join("::"));
            }
        }
        imports
    }

    /// File -> files it imports.
    fn edges(&self) -> BTreeMap<usize, BTreeSet<usize>> {
        let mut edges: BTreeMap<usize, BTreeSet<usize>> = BTreeMap::new();
        for (from, to) in self.imports().into_keys() {
            edges.entry(from).or_default().insert(to);
        }
        edges
    }

    /// The top-level module a file belongs to (`src/api/kserve/http/infer.rs` -> `api`,
    /// `src/error.rs` -> `error`), relative to `src`.
    fn top_level(&self, file: usize, src: &Path) -> String {
        let path = Path::new(&self.files[file]);
        let rel = path.strip_prefix(src).unwrap_or(path);
        let first = rel
            .components()
            .next()
            .map(|c| c.as_os_str().to_string_lossy());
        first.unwrap_or_default().trim_end_matches(".rs").to_owned()
    }

    /// Each pair of top-level modules that import each other, directly or around a circle,
    /// as `a <-> b`, with one file import that makes each direction.
    fn top_level_cycles(&self, src: &Path) -> Vec<String> {
        let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        let mut because: BTreeMap<(String, String), String> = BTreeMap::new();
        for ((from, to), path) in self.imports() {
            let (a, b) = (self.top_level(from, src), self.top_level(to, src));
            // The crate root only declares the modules and re-exports from them.
            if a == b || a == "lib" {
                continue;
            }
            edges.entry(a.clone()).or_default().insert(b.clone());
            because
                .entry((a, b))
                .or_insert_with(|| format!("{}: {path}", self.files[from]));
        }
        let reaches = |from: &str, goal: &str| {
            let (mut seen, mut stack) = (BTreeSet::new(), vec![from.to_owned()]);
            while let Some(m) = stack.pop() {
                if m == goal {
                    return true;
                }
                for to in edges.get(&m).into_iter().flatten() {
                    if seen.insert(to.clone()) {
                        stack.push(to.clone());
                    }
                }
            }
            false
        };
        let mut out = Vec::new();
        for ((a, b), why) in &because {
            if a < b && reaches(b, a) {
                let back = because
                    .get(&(b.clone(), a.clone()))
                    .cloned()
                    .unwrap_or_else(|| format!("{b} reaches {a} through other modules"));
                out.push(format!("{a} <-> {b}\n    {why}\n    {back}"));
            }
        }
        out
    }

    /// One cycle per strongly connected group of files, as `a.rs -> b.rs -> a.rs`, then a
    /// line per step naming the path that makes it.
    fn cycles(&self) -> Vec<String> {
        let (edges, imports) = (self.edges(), self.imports());
        let reach = |from: usize| {
            let (mut seen, mut stack) = (BTreeSet::new(), vec![from]);
            while let Some(f) = stack.pop() {
                for &to in edges.get(&f).into_iter().flatten() {
                    if seen.insert(to) {
                        stack.push(to);
                    }
                }
            }
            seen
        };
        let reaches: Vec<BTreeSet<usize>> = (0..self.files.len()).map(reach).collect();
        let mut reported = BTreeSet::new();
        let mut out = Vec::new();
        for f in 0..self.files.len() {
            if !reaches[f].contains(&f) || reported.contains(&f) {
                continue;
            }
            let group: BTreeSet<usize> = reaches[f]
                .iter()
                .copied()
                .filter(|&g| reaches[g].contains(&f))
                .collect();
            reported.extend(group.iter().copied());
            // The shortest way back to f inside its group.
            let mut back = BTreeMap::new();
            let mut queue = std::collections::VecDeque::from([f]);
            'search: while let Some(at) = queue.pop_front() {
                for &to in edges
                    .get(&at)
                    .into_iter()
                    .flatten()
                    .filter(|t| group.contains(t))
                {
                    if to == f {
                        back.insert(f, at);
                        break 'search;
                    }
                    if to != f && !back.contains_key(&to) {
                        back.insert(to, at);
                        queue.push_back(to);
                    }
                }
            }
            let mut cycle = vec![f];
            let mut at = back.get(&f).copied();
            while let Some(prev) = at.filter(|&p| p != f) {
                cycle.push(prev);
                at = back.get(&prev).copied();
            }
            cycle.push(f);
            cycle.reverse();
            let names: Vec<&str> = cycle.iter().map(|&c| self.files[c].as_str()).collect();
            let mut report = format!(
                "{} ({} files in the circle)",
                names.join(" -> "),
                group.len()
            );
            if group.len() > 2 {
                let all: Vec<&str> = group.iter().map(|&g| self.files[g].as_str()).collect();
                report.push_str(&format!("\n    the circle: {}", all.join(", ")));
            }
            for step in cycle.windows(2) {
                let path = imports.get(&(step[0], step[1])).map_or("", String::as_str);
                report.push_str(&format!("\n    {}: {path}", self.files[step[0]]));
            }
            out.push(report);
        }
        out
    }
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn from_disk(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn no_import_circles_between_files() {
    let src = src();
    let tree = Tree::read(&src.join("lib.rs"), &from_disk);
    let cycles: Vec<String> = tree
        .cycles()
        .into_iter()
        .map(|c| c.replace(&format!("{}/", src.display()), "src/"))
        .collect();
    assert!(
        cycles.is_empty(),
        "import circles between files:\n{}",
        cycles.join("\n")
    );
}

/// Files that may allow `unsafe_code`, and why (ARCHITECTURE.md has the argument).
const UNSAFE_ALLOWED: &[&str] = &[
    // Mapping clients' shared memory, and the SIGBUS guard over it.
    "shm/region.rs",
    "shm/guard.rs",
    // ONNX Runtime's C API where `ort` has no safe call.
    "backend/onnx_raw.rs",
    // glibc's malloc_trim and mallopt.
    "repository/trim.rs",
    // Declares the `unsafe trait OutputMemory` contract; implements nothing.
    "backend/mod.rs",
];

#[test]
fn no_top_level_module_imports_one_that_imports_it_back() {
    let src = src();
    let tree = Tree::read(&src.join("lib.rs"), &from_disk);
    let src_dir = src.display().to_string();
    let cycles: Vec<String> = tree
        .top_level_cycles(Path::new(&src_dir))
        .into_iter()
        .map(|c| c.replace(&format!("{src_dir}/"), "src/"))
        .collect();
    assert!(
        cycles.is_empty(),
        "top-level modules that import each other:\n{}",
        cycles.join("\n")
    );
}

#[test]
fn unsafe_code_is_allowed_only_where_architecture_md_says() {
    let src = src();
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut stray: Vec<String> = files
        .iter()
        .filter(|f| {
            std::fs::read_to_string(f).is_ok_and(|text| {
                let code: Vec<Tok> = tokens(&text);
                code.windows(3).any(|w| {
                    w[0] == Tok::Ident("allow".into())
                        && w[1] == Tok::Punct(b'(')
                        && w[2] == Tok::Ident("unsafe_code".into())
                })
            })
        })
        .map(|f| f.strip_prefix(&src).unwrap_or(f).display().to_string())
        .filter(|name| !UNSAFE_ALLOWED.contains(&name.as_str()))
        .collect();
    stray.sort();
    assert!(
        stray.is_empty(),
        "files allowing unsafe_code beyond ARCHITECTURE.md's list: {}",
        stray.join(", ")
    );
}

#[test]
fn no_file_on_the_request_path_is_over_450_lines() {
    let src = src();
    let mut files = Vec::new();
    for part in REQUEST_PATH {
        let path = src.join(part);
        if path.is_dir() {
            rust_files(&path, &mut files);
        } else {
            files.push(path);
        }
    }
    let mut long: Vec<String> = files
        .iter()
        .filter_map(|f| {
            let lines = std::fs::read_to_string(f).ok()?.lines().count();
            let name = f.strip_prefix(&src).unwrap_or(f).display();
            (lines > MAX_LINES).then(|| format!("src/{name}: {lines} lines"))
        })
        .collect();
    long.sort();
    assert!(
        long.is_empty(),
        "over {MAX_LINES} lines:\n{}",
        long.join("\n")
    );
}

#[test]
fn api_top_level_is_the_front_door() {
    let mut stray: Vec<String> = std::fs::read_dir(src().join("api"))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| !e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| !API_TOP_LEVEL.contains(&name.as_str()))
        .collect();
    stray.sort();
    assert!(
        stray.is_empty(),
        "src/api/ holds more than the front door: {}",
        stray.join(", ")
    );
}

#[cfg(test)]
mod parser {
    use super::*;

    /// The cycles of a crate given as (path, text) pairs; the root is `src/lib.rs`.
    fn cycles(files: &[(&str, &str)]) -> Vec<String> {
        let map: BTreeMap<PathBuf, String> = files
            .iter()
            .map(|(p, t)| (PathBuf::from(p), (*t).to_owned()))
            .collect();
        let tree = Tree::read(Path::new("src/lib.rs"), &|p: &Path| map.get(p).cloned());
        let cycles = tree.cycles();
        cycles
            .iter()
            .map(|c| c.lines().next().unwrap_or_default().to_owned())
            .collect()
    }

    fn edges(files: &[(&str, &str)]) -> Vec<String> {
        let map: BTreeMap<PathBuf, String> = files
            .iter()
            .map(|(p, t)| (PathBuf::from(p), (*t).to_owned()))
            .collect();
        let tree = Tree::read(Path::new("src/lib.rs"), &|p: &Path| map.get(p).cloned());
        let mut out = Vec::new();
        for (from, tos) in tree.edges() {
            for to in tos {
                out.push(format!("{} -> {}", tree.files[from], tree.files[to]));
            }
        }
        out.sort();
        out
    }

    #[test]
    fn a_grouped_multi_line_use_reaches_each_file() {
        let found = edges(&[
            ("src/lib.rs", "pub mod a;\npub mod b;\nmod c;"),
            (
                "src/a.rs",
                "pub use crate::{\n    b::{self, One},\n    c::Two as Deux,\n};\nfn f() {}",
            ),
            ("src/b.rs", "pub struct One;"),
            ("src/c.rs", "pub(crate) enum Two { X }"),
        ]);
        assert_eq!(found, ["src/a.rs -> src/b.rs", "src/a.rs -> src/c.rs"]);
    }

    #[test]
    fn a_re_exporting_module_file_is_looked_through() {
        let files = [
            ("src/lib.rs", "mod m;"),
            (
                "src/m/mod.rs",
                "mod x;\nmod y;\npub use x::Thing;\npub use self::y::*;",
            ),
            ("src/m/x.rs", "use super::Other;\npub struct Thing;"),
            ("src/m/y.rs", "use super::Thing;\npub struct Other;"),
        ];
        assert_eq!(
            edges(&files),
            [
                // The re-exports leave mod.rs, but nothing can reach it: it defines nothing.
                "src/m/mod.rs -> src/m/x.rs",
                "src/m/mod.rs -> src/m/y.rs",
                "src/m/x.rs -> src/m/y.rs",
                "src/m/y.rs -> src/m/x.rs"
            ]
        );
        assert_eq!(
            cycles(&files),
            ["src/m/x.rs -> src/m/y.rs -> src/m/x.rs (2 files in the circle)"]
        );
    }

    #[test]
    fn a_parent_defining_what_its_child_imports_is_a_circle() {
        let files = [
            ("src/lib.rs", "mod http;"),
            (
                "src/http.rs",
                "mod op;\npub struct Shared;\nfn route() { op::run() }",
            ),
            ("src/http/op.rs", "use super::Shared;\npub fn run() {}"),
        ];
        assert_eq!(
            cycles(&files),
            ["src/http.rs -> src/http/op.rs -> src/http.rs (2 files in the circle)"]
        );
    }

    #[test]
    fn a_circle_names_the_path_behind_each_step() {
        let map = BTreeMap::from([
            (PathBuf::from("src/lib.rs"), "mod a; mod b;".to_owned()),
            (
                PathBuf::from("src/a.rs"),
                "pub fn f() { crate::b::g() }".to_owned(),
            ),
            (
                PathBuf::from("src/b.rs"),
                "use crate::a::f;\npub fn g() {}".to_owned(),
            ),
        ]);
        let tree = Tree::read(Path::new("src/lib.rs"), &|p: &Path| map.get(p).cloned());
        assert_eq!(
            tree.cycles(),
            ["src/a.rs -> src/b.rs -> src/a.rs (2 files in the circle)\n    src/a.rs: crate::b::g\n    src/b.rs: crate::a::f"]
        );
    }

    #[test]
    fn inline_paths_count_and_comments_strings_and_tests_do_not() {
        let found = edges(&[
            ("src/lib.rs", "mod a; mod b; mod c; mod d;"),
            (
                "src/a.rs",
                "// crate::c::C\n/* crate::c::C */\nconst S: &str = \"crate::c::C\";\nfn f(x: &'static str) -> char {\n    let _ = crate::b::g(x);\n    if '\\'' == '{' { '\\\\' } else { '\\u{2500}' }\n}\n#[cfg(test)]\nmod tests {\n    use crate::d::D;\n}\n#[cfg(test)]\nmod more;\n",
            ),
            ("src/b.rs", "pub fn g(_: &str) {}"),
            ("src/c.rs", "pub struct C;"),
            ("src/d.rs", "pub struct D;"),
            ("src/a/more.rs", "use crate::c::C;"),
        ]);
        assert_eq!(found, ["src/a.rs -> src/b.rs"]);
    }

    #[test]
    fn super_and_module_aliases_resolve_in_inline_modules() {
        let found = edges(&[
            (
                "src/lib.rs",
                "mod p;\nmod q { use super::p; pub fn f() { p::parse(); } }\nmod r;",
            ),
            ("src/p/mod.rs", "pub fn parse() {}"),
            ("src/r.rs", "#[path = \"elsewhere.rs\"]\nmod s;"),
            ("src/elsewhere.rs", "pub fn t() { super::super::q::f() }"),
        ]);
        assert_eq!(
            found,
            [
                "src/elsewhere.rs -> src/lib.rs",
                "src/lib.rs -> src/p/mod.rs"
            ]
        );
    }

    #[test]
    fn other_crates_and_enum_variants_are_not_files() {
        let found = edges(&[
            ("src/lib.rs", "mod e; mod f;"),
            ("src/e.rs", "pub enum Kind { A }"),
            (
                "src/f.rs",
                "use std::io::{self, Read};\nuse crate::e::Kind::A;\nfn g() { tokio::spawn(); }",
            ),
        ]);
        assert_eq!(found, ["src/f.rs -> src/e.rs"]);
    }
}
