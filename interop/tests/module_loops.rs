//! The project's module rule, checked on the source: no module of the engine (`engine/`,
//! crate `dmabridge`), of interop (`interop/src/`, crate `dmabridge-interop`), of the CLI
//! (`cli/src/`) or of the lab (`lab/src/`) names a module that names it back.
//!
//! For each crate root the check follows its `mod` declarations (inline `mod x { .. }` blocks
//! included; `#[cfg(feature = ..)]` modules too) and reads every module's code, without its
//! comments, string and char literals, or anything under `#[cfg(test)]` (the attributed item
//! only: a `mod tests;`, a `mod tests { .. }`, a test-only function). In what is left, every
//! path that starts at `crate::`, `$crate::` or `super::` (`super::super::` too), in a `use`
//! (grouped or nested: `use crate::{a::x, b::{c, d::y}}`, over several lines; `pub(crate) use`
//! re-exports alike) or in code (`crate::a::f()`), names the longest module that prefixes it.
//! A pair of modules that name each other is a loop, unless one contains the other (a parent
//! and its child, or a deeper descendant). Each loop is reported with the `file:line` of one
//! naming each way.
//!
//! Paths written from a module's own children (`use child::X`, `self::child`) can only name
//! a descendant, and a descendant never makes a loop, so they are not read.
//!
//! std only: the check reads the trees through `CARGO_MANIFEST_DIR/..`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

// ---------------------------------------------------------------------------------------
// Source text without comments and literals

/// The source with every comment, string literal (plain, byte, C, raw) and char literal
/// replaced by spaces, newlines kept, so that lines still count as in the file.
fn blank_comments_and_literals(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = b.to_vec();
    let blank = |out: &mut Vec<u8>, from: usize, to: usize| {
        for c in &mut out[from..to.min(b.len())] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
    };
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c >= 0x80;
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'/' && b.get(i + 1) == Some(&b'/') {
            let end = b[i..].iter().position(|&c| c == b'\n').map_or(b.len(), |n| i + n);
            blank(&mut out, i, end);
            i = end;
        } else if c == b'/' && b.get(i + 1) == Some(&b'*') {
            let (mut j, mut depth) = (i + 2, 1);
            while j < b.len() && depth > 0 {
                if b[j] == b'/' && b.get(j + 1) == Some(&b'*') {
                    depth += 1;
                    j += 2;
                } else if b[j] == b'*' && b.get(j + 1) == Some(&b'/') {
                    depth -= 1;
                    j += 2;
                } else {
                    j += 1;
                }
            }
            blank(&mut out, i, j);
            i = j;
        } else if c == b'"' {
            let mut j = i + 1;
            while j < b.len() && b[j] != b'"' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            blank(&mut out, i, j + 1);
            i = j + 1;
        } else if c == b'r' && (i == 0 || !ident(b[i - 1]) || (i >= 1 && matches!(b[i - 1], b'b' | b'c') && (i == 1 || !ident(b[i - 2])))) {
            // A raw string r"..", r#".."#, br"..", cr"..": find the closing quote and hashes.
            let hashes = b[i + 1..].iter().take_while(|&&c| c == b'#').count();
            if b.get(i + 1 + hashes) == Some(&b'"') {
                let close: Vec<u8> = std::iter::once(b'"').chain(std::iter::repeat(b'#').take(hashes)).collect();
                let body = i + 2 + hashes;
                let end = b[body..].windows(close.len()).position(|w| w == close.as_slice()).map_or(b.len(), |n| body + n + close.len());
                blank(&mut out, i, end);
                i = end;
            } else {
                i += 1;
            }
        } else if c == b'\'' {
            // A char literal ('x', '\n', '\u{..}', '{') or a lifetime or label ('a): a char
            // literal closes after one char or one escape.
            if b.get(i + 1) == Some(&b'\\') {
                // The escaped char itself (b[i + 2]) may be a quote: '\''.
                let end = b.get(i + 3..).unwrap_or(&[]).iter().take(12).position(|&c| c == b'\'').map_or(i + 1, |n| i + 3 + n + 1);
                blank(&mut out, i, end);
                i = end;
            } else {
                let width = src[i + 1..].chars().next().map_or(0, char::len_utf8);
                if width > 0 && b.get(i + 1 + width) == Some(&b'\'') {
                    blank(&mut out, i, i + 2 + width);
                    i += 2 + width;
                } else {
                    i += 1;
                }
            }
        } else {
            i += 1;
        }
    }
    // Only whole UTF-8 sequences were replaced (inside comments and literals), so the bytes
    // are still UTF-8.
    String::from_utf8(out).expect("blanking keeps UTF-8")
}

// ---------------------------------------------------------------------------------------
// Tokens

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Ident(String),
    /// `::`
    PathSep,
    Punct(char),
}

#[derive(Clone, Debug)]
struct Token {
    tok: Tok,
    line: usize,
}

impl Token {
    fn is_ident(&self, s: &str) -> bool {
        matches!(&self.tok, Tok::Ident(i) if i == s)
    }

    fn is(&self, c: char) -> bool {
        self.tok == Tok::Punct(c)
    }

    fn ident(&self) -> Option<&str> {
        match &self.tok {
            Tok::Ident(i) => Some(i),
            _ => None,
        }
    }
}

fn tokens(blanked: &str) -> Vec<Token> {
    let mut out = Vec::new();
    let mut line = 1;
    let mut chars = blanked.chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_whitespace() {
            line += usize::from(c == '\n');
        } else if c.is_alphanumeric() || c == '_' {
            let mut s = String::from(c);
            take_ident(&mut chars, &mut s);
            // A raw identifier (r#mod) is never a keyword.
            if s == "r" && chars.peek() == Some(&'#') {
                chars.next();
                s.push('#');
                take_ident(&mut chars, &mut s);
            }
            out.push(Token { tok: Tok::Ident(s), line });
        } else if c == ':' && chars.peek() == Some(&':') {
            chars.next();
            out.push(Token { tok: Tok::PathSep, line });
        } else {
            out.push(Token { tok: Tok::Punct(c), line });
        }
    }
    out
}

/// The index after the bracketed group that opens at `open` (`(`, `[` or `{`), or the end.
fn after_group(t: &[Token], open: usize) -> usize {
    let mut depth = 0i32;
    for (k, tok) in t.iter().enumerate().skip(open) {
        match tok.tok {
            Tok::Punct('(' | '[' | '{') => depth += 1,
            Tok::Punct(')' | ']' | '}') => {
                depth -= 1;
                if depth == 0 {
                    return k + 1;
                }
            }
            _ => {}
        }
    }
    t.len()
}

/// Whether `#[cfg(test)]` (or `#![cfg(test)]`, `inner`) starts at `i`.
fn cfg_test_at(t: &[Token], i: usize) -> Option<(usize, bool)> {
    let inner = t.get(i + 1).is_some_and(|x| x.is('!'));
    let s = i + 1 + usize::from(inner);
    let ok = t[i].is('#')
        && t.get(s).is_some_and(|x| x.is('['))
        && t.get(s + 1).is_some_and(|x| x.is_ident("cfg"))
        && t.get(s + 2).is_some_and(|x| x.is('('))
        && t.get(s + 3).is_some_and(|x| x.is_ident("test"))
        && t.get(s + 4).is_some_and(|x| x.is(')'))
        && t.get(s + 5).is_some_and(|x| x.is(']'));
    ok.then_some((s + 6, inner))
}

/// The tokens without the items that `#[cfg(test)]` keeps out of a normal build: from the
/// attribute to the item's `;` or closing `}` (a field or an argument: to its `,`). None
/// when the whole file is `#![cfg(test)]`.
fn without_cfg_test(t: Vec<Token>) -> Option<Vec<Token>> {
    let mut out = Vec::with_capacity(t.len());
    let mut i = 0;
    while i < t.len() {
        let Some((mut k, inner)) = cfg_test_at(&t, i) else {
            out.push(t[i].clone());
            i += 1;
            continue;
        };
        if inner {
            return None;
        }
        // Further attributes on the same item.
        while k < t.len() && t[k].is('#') && t.get(k + 1).is_some_and(|x| x.is('[')) {
            k = after_group(&t, k + 1);
        }
        let mut depth = 0i32;
        while k < t.len() {
            match t[k].tok {
                Tok::Punct('(' | '[' | '{') => depth += 1,
                Tok::Punct(')' | ']' | '}') => {
                    depth -= 1;
                    if depth < 0 {
                        break; // the end of what holds the item: keep it
                    }
                    if depth == 0 && t[k].is('}') {
                        // `struct X { .. }`, `fn f() { .. }`, `mod tests { .. }`; a
                        // `struct X { .. };`-less item ends here, but `X { .. };` does not.
                        k += 1;
                        if t.get(k).is_some_and(|x| x.is(';')) {
                            k += 1;
                        }
                        break;
                    }
                }
                Tok::Punct(';') if depth == 0 => {
                    k += 1;
                    break;
                }
                Tok::Punct(',') if depth == 0 => break,
                _ => {}
            }
            k += 1;
        }
        i = k;
    }
    Some(out)
}

// ---------------------------------------------------------------------------------------
// Modules

/// A module: its path from the crate root (empty for the root), the file that holds it and
/// the range of that file's tokens that is its own (an inline module's block; a file
/// module's whole file, less its inline modules, which are modules of their own).
struct Module {
    path: Vec<String>,
    file: PathBuf,
    tokens: std::rc::Rc<Vec<Token>>,
    /// Token ranges of the file that belong to this module.
    own: Vec<(usize, usize)>,
}

fn name(path: &[String]) -> String {
    if path.is_empty() {
        "crate".to_string()
    } else {
        path.join("::")
    }
}

/// Reads the crate whose root file is `root` (lib.rs or main.rs), following `mod`
/// declarations. Panics where a declared module has no file.
fn read_crate(root: &Path) -> Vec<Module> {
    let mut modules = Vec::new();
    read_file(root, Vec::new(), root.parent().unwrap().to_path_buf(), &mut modules);
    modules
}

fn read_file(file: &Path, path: Vec<String>, child_dir: PathBuf, modules: &mut Vec<Module>) {
    let src = fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let Some(t) = without_cfg_test(tokens(&blank_comments_and_literals(&src))) else {
        return; // #![cfg(test)]
    };
    let t = std::rc::Rc::new(t);
    read_block(file, &t, 0, t.len(), path, child_dir, modules);
}

/// The module whose tokens are `t[from..to]` (less its inline modules), and the modules it
/// declares.
fn read_block(file: &Path, t: &std::rc::Rc<Vec<Token>>, from: usize, to: usize, path: Vec<String>, child_dir: PathBuf, modules: &mut Vec<Module>) {
    let me = modules.len();
    modules.push(Module { path: path.clone(), file: file.to_path_buf(), tokens: t.clone(), own: Vec::new() });
    let mut own = Vec::new();
    let mut start = from;
    let mut i = from;
    while i < to {
        let declares = t[i].is_ident("mod") && (i == 0 || !t[i - 1].tok.eq(&Tok::PathSep));
        let child = declares.then(|| t.get(i + 1).and_then(Token::ident)).flatten();
        let Some(child) = child.map(|c| c.trim_start_matches("r#").to_string()) else {
            i += 1;
            continue;
        };
        let mut sub = path.clone();
        sub.push(child.clone());
        match t.get(i + 2).map(|x| &x.tok) {
            Some(Tok::Punct(';')) => {
                let flat = child_dir.join(format!("{child}.rs"));
                let nested = child_dir.join(&child).join("mod.rs");
                let (f, dir) = if flat.is_file() {
                    (flat, child_dir.join(&child))
                } else if nested.is_file() {
                    (nested, child_dir.join(&child))
                } else {
                    panic!(
                        "{}:{}: `mod {child};` has neither {} nor {} (a #[path] module? this check does not follow them)",
                        file.display(),
                        t[i].line,
                        flat.display(),
                        nested.display()
                    )
                };
                read_file(&f, sub, dir, modules);
                i += 3;
            }
            Some(Tok::Punct('{')) => {
                let end = after_group(t, i + 2);
                own.push((start, i));
                read_block(file, t, i + 3, end - 1, sub, child_dir.join(&child), modules);
                start = end;
                i = end;
            }
            _ => i += 1,
        }
    }
    own.push((start, to));
    modules[me].own = own;
}

// ---------------------------------------------------------------------------------------
// Paths

/// One path a module writes: its segments from the crate root (`super`s resolved) and the
/// line of its last segment.
struct Named {
    path: Vec<String>,
    line: usize,
}

/// Every path in `t[from..to]` that starts at `crate::` or `super::`, written in module
/// `module`, with `use` trees expanded.
fn paths(module: &[String], t: &[Token], from: usize, to: usize) -> Vec<Named> {
    let mut out = Vec::new();
    let mut i = from;
    while i < to {
        let starts = (t[i].is_ident("crate") || t[i].is_ident("super"))
            && t.get(i + 1).is_some_and(|x| x.tok == Tok::PathSep)
            && (i == 0 || t[i - 1].tok != Tok::PathSep);
        if !starts {
            i += 1;
            continue;
        }
        let mut base: Vec<String> = if t[i].is_ident("crate") { Vec::new() } else { module.to_vec() };
        let mut k = i;
        while t[k].is_ident("super") && t.get(k + 1).is_some_and(|x| x.tok == Tok::PathSep) {
            base.pop();
            k += 2;
            if !t.get(k).is_some_and(|x| x.is_ident("super")) {
                break;
            }
        }
        if t[k].is_ident("crate") {
            k += 2;
        }
        let line = t[i].line;
        i = tree(t, k, to, base, line, &mut out);
    }
    out
}

/// Reads a use tree (or a plain path) at `t[k]` under `prefix`; returns the index after it.
fn tree(t: &[Token], mut k: usize, to: usize, mut prefix: Vec<String>, mut line: usize, out: &mut Vec<Named>) -> usize {
    loop {
        match t.get(k).filter(|_| k < to).map(|x| &x.tok) {
            Some(Tok::Ident(s)) => {
                if s != "self" {
                    prefix.push(s.trim_start_matches("r#").to_string());
                }
                line = t[k].line;
                k += 1;
                if t.get(k).is_some_and(|x| x.tok == Tok::PathSep) && k + 1 < to {
                    k += 1;
                    continue;
                }
                out.push(Named { path: prefix, line });
                return k;
            }
            Some(Tok::Punct('{')) => {
                let end = after_group(t, k).min(to);
                let mut j = k + 1;
                while j < end - 1 {
                    if t[j].is(',') {
                        j += 1;
                        continue;
                    }
                    let next = tree(t, j, end - 1, prefix.clone(), t[j].line, out);
                    // `x as y`, or whatever a tree ends on: up to the next `,` of this group.
                    j = next.max(j + 1);
                    while j < end - 1 && !t[j].is(',') {
                        if t[j].is('{') {
                            j = after_group(t, j);
                        } else {
                            j += 1;
                        }
                    }
                }
                return end;
            }
            // `*`, `<`, or the end of the path.
            _ => {
                out.push(Named { path: prefix, line });
                return k;
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Loops

/// One module naming another: where, first.
type Edges = BTreeMap<(Vec<String>, Vec<String>), (PathBuf, usize)>;

fn edges(modules: &[Module]) -> Edges {
    let known: BTreeSet<&[String]> = modules.iter().map(|m| m.path.as_slice()).collect();
    let mut edges = Edges::new();
    for m in modules {
        for &(from, to) in &m.own {
            for named in paths(&m.path, &m.tokens, from, to) {
                let k = (0..=named.path.len()).rev().find(|&k| known.contains(&named.path[..k])).unwrap_or(0);
                let target = named.path[..k].to_vec();
                if target.starts_with(&m.path) || m.path.starts_with(&target) {
                    continue; // itself, an ancestor or a descendant
                }
                edges.entry((m.path.clone(), target)).or_insert((m.file.clone(), named.line));
            }
        }
    }
    edges
}

fn loops(root: &str) -> (usize, usize, Vec<String>) {
    let ws = workspace();
    let modules = read_crate(&ws.join(root));
    let edges = edges(&modules);
    let at = |(f, l): &(PathBuf, usize)| format!("{}:{l}", f.strip_prefix(&ws).unwrap_or(f).display());
    let mut found = Vec::new();
    for ((a, b), there) in &edges {
        if a < b {
            if let Some(back) = edges.get(&(b.clone(), a.clone())) {
                found.push(format!("{} <-> {}: {} names {}; {} names {}", name(a), name(b), at(there), name(b), at(back), name(a)));
            }
        }
    }
    (modules.len(), edges.len(), found)
}

fn check(root: &str) {
    let (modules, edges, found) = loops(root);
    // Not an empty check: the crate has modules, and they name each other.
    assert!(modules > 1 && edges > 0, "{root}: read {modules} modules and {edges} arrows between them");
    if !found.is_empty() {
        let mut msg = format!("{root}: {} module loop(s): modules that name each other (across {modules} modules):\n", found.len());
        for l in &found {
            writeln!(msg, "  {l}").unwrap();
        }
        panic!("{msg}");
    }
}

#[test]
fn engine_has_no_module_loops() {
    check("engine/lib.rs");
}

#[test]
fn interop_has_no_module_loops() {
    check("interop/src/lib.rs");
}

#[test]
fn cli_has_no_module_loops() {
    check("cli/src/main.rs");
}

#[test]
fn lab_has_no_module_loops() {
    check("lab/src/lib.rs");
}

// ---------------------------------------------------------------------------------------
// The reader itself, on made-up sources

#[test]
fn reads_grouped_nested_and_reexported_paths() {
    let src = r#"
use crate::{a::x, b::{c, d::y}};
pub(crate) use crate::e::Z;
pub(crate) use super::{f::W, g};
use super::super::h::V;
use crate::{
    i::{self, I},
    j::*,
};
fn f() { crate::k::f::<u8>(); let s = "crate::no::x"; let c = ('{', '\'', '\\'); }
// crate::no::comment
/* crate::no::block /* nested */ crate::no::still */
#[cfg(test)]
fn only_in_tests() { crate::no::test_fn(); }
#[cfg(test)]
mod tests { use crate::no::tests; }
"#;
    let t = without_cfg_test(tokens(&blank_comments_and_literals(src))).unwrap();
    let module = ["m".to_string(), "n".to_string(), "o".to_string()];
    let got: Vec<String> = paths(&module, &t, 0, t.len()).iter().map(|n| format!("{}@{}", n.path.join("::"), n.line)).collect();
    assert_eq!(
        got,
        [
            "a::x@2", "b::c@2", "b::d::y@2", "e::Z@3", "m::n::f::W@4", "m::n::g@4", "m::h::V@5", "i@7", "i::I@7", "j@8",
            "k::f@10"
        ]
    );
}

/// Appends to `s` the identifier characters `chars` continues with.
fn take_ident(chars: &mut std::iter::Peekable<std::str::Chars<'_>>, s: &mut String) {
    while let Some(&n) = chars.peek() {
        if !(n.is_alphanumeric() || n == '_') {
            break;
        }
        s.push(n);
        chars.next();
    }
}
