//! Just enough of a C preprocessor and integer-expression evaluator to read the installed
//! `drm_fourcc.h` and evaluate its modifier macros, so that the tests take their expected
//! values from the kernel's header rather than from a second copy of it: object-like and
//! function-like `#define`s, `##` pasting, casts to `__u64`/`int`, `ULL` suffixes, character
//! literals, and C's integer operators with C's precedence, all on 64-bit unsigned values.

use std::collections::{HashMap, HashSet};

/// Where libdrm-dev installs the header; `DMABRIDGE_DRM_FOURCC_H` names another copy.
pub const DEFAULT_PATH: &str = "/usr/include/libdrm/drm_fourcc.h";

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    Ident(String),
    Num(u64),
    Punct(&'static str),
}

#[derive(Debug, Clone)]
struct Macro {
    params: Option<Vec<String>>,
    body: Vec<Tok>,
    /// The body as written, whitespace collapsed.
    text: String,
}

pub struct Header {
    macros: HashMap<String, Macro>,
    /// Object-like macros in the header's order.
    order: Vec<String>,
}

const PUNCTS: [&str; 30] = [
    "##", "<<", ">>", "==", "!=", "<=", ">=", "&&", "||", "(", ")", ",", "|", "&", "^", "~", "+", "-", "*", "/", "%",
    "!", "<", ">", "?", ":", "#", "{", "}", ";",
];

fn tokenize(s: &str) -> Result<Vec<Tok>, String> {
    let b = s.as_bytes();
    let mut i = 0;
    let mut out = Vec::new();
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
        } else if c.is_ascii_alphabetic() || c == b'_' {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            out.push(Tok::Ident(s[start..i].to_owned()));
        } else if c.is_ascii_digit() {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric()) {
                i += 1;
            }
            let lit = s[start..i].trim_end_matches(['u', 'U', 'l', 'L']);
            let n = if let Some(h) = lit.strip_prefix("0x").or_else(|| lit.strip_prefix("0X")) {
                u64::from_str_radix(h, 16)
            } else if lit.len() > 1 && lit.starts_with('0') {
                u64::from_str_radix(&lit[1..], 8)
            } else {
                lit.parse()
            };
            out.push(Tok::Num(n.map_err(|e| format!("number {:?}: {e}", &s[start..i]))?));
        } else if c == b'\'' {
            // 'A': fourcc_code's arguments.
            if i + 2 < b.len() && b[i + 2] == b'\'' {
                out.push(Tok::Num(b[i + 1] as u64));
                i += 3;
            } else {
                return Err(format!("character literal at {:?}", &s[i..]));
            }
        } else if let Some(p) = PUNCTS.iter().find(|p| s[i..].starts_with(**p)) {
            out.push(Tok::Punct(p));
            i += p.len();
        } else {
            return Err(format!("unexpected {:?}", &s[i..]));
        }
    }
    Ok(out)
}

fn strip_comments(src: &str) -> String {
    let mut out = String::with_capacity(src.len());
    let mut rest = src;
    while let Some(start) = rest.find("/*") {
        out.push_str(&rest[..start]);
        out.push(' ');
        rest = match rest[start + 2..].find("*/") {
            Some(end) => &rest[start + 2 + end + 2..],
            None => "",
        };
    }
    out.push_str(rest);
    out.lines().map(|l| l.split("//").next().unwrap_or("")).collect::<Vec<_>>().join("\n")
}

impl Header {
    /// The header at `DMABRIDGE_DRM_FOURCC_H` or [`DEFAULT_PATH`].
    pub fn load() -> Header {
        let path = std::env::var("DMABRIDGE_DRM_FOURCC_H").unwrap_or_else(|_| DEFAULT_PATH.to_owned());
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!(
                "{path}: {e}: the modifier tests read the kernel's drm_fourcc.h; install libdrm-dev \
                 (scripts/setup.sh brings it with the GStreamer development packages) or point \
                 DMABRIDGE_DRM_FOURCC_H at a copy"
            )
        });
        Header::parse(&text)
    }

    pub fn parse(src: &str) -> Header {
        let joined = strip_comments(src).replace("\\\n", " ");
        let mut macros = HashMap::new();
        let mut order = Vec::new();
        for line in joined.lines() {
            let Some(rest) = line.trim_start().strip_prefix("#define") else { continue };
            let rest = rest.trim_start();
            let name_len = rest.bytes().take_while(|b| b.is_ascii_alphanumeric() || *b == b'_').count();
            let (name, after) = rest.split_at(name_len);
            let (params, body) = match after.strip_prefix('(') {
                Some(p) => {
                    let Some(close) = p.find(')') else { continue };
                    let params = p[..close].split(',').map(|s| s.trim().to_owned()).filter(|s| !s.is_empty()).collect();
                    (Some(params), &p[close + 1..])
                }
                None => (None, after),
            };
            // Bodies this evaluator cannot read (none of the modifier macros) are left out.
            let Ok(toks) = tokenize(body) else { continue };
            if params.is_none() {
                order.push(name.to_owned());
            }
            let text = body.split_whitespace().collect::<Vec<_>>().join(" ");
            macros.insert(name.to_owned(), Macro { params, body: toks, text });
        }
        Header { macros, order }
    }

    /// Object-like macros, in order, with their bodies as written.
    pub fn object_macros(&self) -> impl Iterator<Item = (&str, &str)> {
        self.order.iter().filter_map(|n| self.macros.get(n).map(|m| (n.as_str(), m.text.as_str())))
    }

    /// The value of a C expression written with the header's macros.
    pub fn eval(&self, expr: &str) -> Result<u64, String> {
        let toks = self.expand(&tokenize(expr)?, &HashSet::new(), 0)?;
        let mut p = Parser { toks: &toks, pos: 0 };
        let v = p.or()?;
        if p.pos != toks.len() {
            return Err(format!("{expr:?}: trailing {:?}", &toks[p.pos..]));
        }
        Ok(v)
    }

    fn expand(&self, toks: &[Tok], hide: &HashSet<String>, depth: usize) -> Result<Vec<Tok>, String> {
        if depth > 64 {
            return Err("macro expansion too deep".to_owned());
        }
        let mut out = Vec::new();
        let mut i = 0;
        while i < toks.len() {
            let Tok::Ident(name) = &toks[i] else {
                out.push(toks[i].clone());
                i += 1;
                continue;
            };
            let Some(m) = self.macros.get(name).filter(|_| !hide.contains(name)) else {
                out.push(toks[i].clone());
                i += 1;
                continue;
            };
            let mut inner = hide.clone();
            inner.insert(name.clone());
            match &m.params {
                None => {
                    out.extend(self.expand(&m.body, &inner, depth + 1)?);
                    i += 1;
                }
                Some(params) => {
                    if toks.get(i + 1) != Some(&Tok::Punct("(")) {
                        out.push(toks[i].clone());
                        i += 1;
                        continue;
                    }
                    let (args, next) = split_args(toks, i + 2)?;
                    if args.len() != params.len() && !(params.is_empty() && args.len() == 1 && args[0].is_empty()) {
                        return Err(format!("{name}: {} arguments for {} parameters", args.len(), params.len()));
                    }
                    let body = self.substitute(m, params, &args, hide, depth)?;
                    out.extend(self.expand(&body, &inner, depth + 1)?);
                    i = next;
                }
            }
        }
        Ok(out)
    }

    /// The body with the arguments in place: raw beside `##` (then pasted), expanded
    /// elsewhere, as C does.
    fn substitute(&self, m: &Macro, params: &[String], args: &[Vec<Tok>], hide: &HashSet<String>, depth: usize) -> Result<Vec<Tok>, String> {
        let param = |t: &Tok| match t {
            Tok::Ident(n) => params.iter().position(|p| p == n),
            _ => None,
        };
        let mut out: Vec<Tok> = Vec::new();
        let mut paste_next = false;
        for (j, t) in m.body.iter().enumerate() {
            if *t == Tok::Punct("##") {
                paste_next = true;
                continue;
            }
            let beside_paste = paste_next || m.body.get(j + 1) == Some(&Tok::Punct("##"));
            let mut piece = match param(t) {
                Some(k) if beside_paste => args[k].clone(),
                Some(k) => self.expand(&args[k], hide, depth + 1)?,
                None => vec![t.clone()],
            };
            if paste_next {
                paste_next = false;
                let left = out.pop().ok_or("## at the start of a body")?;
                if piece.is_empty() {
                    out.push(left);
                    continue;
                }
                let right = piece.remove(0);
                let glued = format!("{}{}", spell(&left), spell(&right));
                out.extend(tokenize(&glued)?);
            }
            out.extend(piece);
        }
        Ok(out)
    }
}

fn spell(t: &Tok) -> String {
    match t {
        Tok::Ident(s) => s.clone(),
        Tok::Num(n) => n.to_string(),
        Tok::Punct(p) => (*p).to_owned(),
    }
}

/// The arguments of a call whose `(` is just before `start`, and the index after its `)`.
fn split_args(toks: &[Tok], start: usize) -> Result<(Vec<Vec<Tok>>, usize), String> {
    let mut args = vec![Vec::new()];
    let mut depth = 0;
    let mut i = start;
    while i < toks.len() {
        match &toks[i] {
            Tok::Punct("(") => depth += 1,
            Tok::Punct(")") if depth == 0 => return Ok((args, i + 1)),
            Tok::Punct(")") => depth -= 1,
            Tok::Punct(",") if depth == 0 => {
                args.push(Vec::new());
                i += 1;
                continue;
            }
            _ => {}
        }
        if let Some(last) = args.last_mut() {
            last.push(toks[i].clone());
        }
        i += 1;
    }
    Err("unclosed macro call".to_owned())
}

struct Parser<'a> {
    toks: &'a [Tok],
    pos: usize,
}

const TYPES: [&str; 5] = ["__u64", "uint64_t", "int", "__u32", "unsigned"];

impl Parser<'_> {
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.pos)
    }

    fn eat(&mut self, p: &str) -> bool {
        if matches!(self.peek(), Some(Tok::Punct(q)) if *q == p) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn binary(&mut self, ops: &[&'static str], next: fn(&mut Self) -> Result<u64, String>) -> Result<u64, String> {
        let mut v = next(self)?;
        'outer: loop {
            for op in ops {
                if self.eat(op) {
                    let r = next(self)?;
                    v = match *op {
                        "|" => v | r,
                        "^" => v ^ r,
                        "&" => v & r,
                        "==" => (v == r) as u64,
                        "!=" => (v != r) as u64,
                        "<<" => v.checked_shl(u32::try_from(r).map_err(|_| "shift")?).ok_or("shift by 64 or more")?,
                        ">>" => v.checked_shr(u32::try_from(r).map_err(|_| "shift")?).ok_or("shift by 64 or more")?,
                        "+" => v.wrapping_add(r),
                        "-" => v.wrapping_sub(r),
                        "*" => v.wrapping_mul(r),
                        "/" => v.checked_div(r).ok_or("division by zero")?,
                        "%" => v.checked_rem(r).ok_or("division by zero")?,
                        _ => return Err(format!("operator {op}")),
                    };
                    continue 'outer;
                }
            }
            return Ok(v);
        }
    }

    fn or(&mut self) -> Result<u64, String> {
        self.binary(&["|"], Self::xor)
    }
    fn xor(&mut self) -> Result<u64, String> {
        self.binary(&["^"], Self::and)
    }
    fn and(&mut self) -> Result<u64, String> {
        self.binary(&["&"], Self::equality)
    }
    fn equality(&mut self) -> Result<u64, String> {
        self.binary(&["==", "!="], Self::shift)
    }
    fn shift(&mut self) -> Result<u64, String> {
        self.binary(&["<<", ">>"], Self::additive)
    }
    fn additive(&mut self) -> Result<u64, String> {
        self.binary(&["+", "-"], Self::multiplicative)
    }
    fn multiplicative(&mut self) -> Result<u64, String> {
        self.binary(&["*", "/", "%"], Self::unary)
    }

    fn unary(&mut self) -> Result<u64, String> {
        if self.eat("~") {
            return Ok(!self.unary()?);
        }
        if self.eat("-") {
            return Ok(self.unary()?.wrapping_neg());
        }
        if self.eat("+") {
            return self.unary();
        }
        if self.eat("!") {
            return Ok((self.unary()? == 0) as u64);
        }
        // A cast: `(` type `)`.
        if let (Some(Tok::Punct("(")), Some(Tok::Ident(t)), Some(Tok::Punct(")"))) =
            (self.toks.get(self.pos), self.toks.get(self.pos + 1), self.toks.get(self.pos + 2))
        {
            if TYPES.contains(&t.as_str()) {
                let ty = t.clone();
                self.pos += 3;
                let v = self.unary()?;
                return Ok(match ty.as_str() {
                    "int" => v as i32 as i64 as u64,
                    "__u32" | "unsigned" => v as u32 as u64,
                    _ => v,
                });
            }
        }
        self.primary()
    }

    fn primary(&mut self) -> Result<u64, String> {
        match self.peek().cloned() {
            Some(Tok::Num(n)) => {
                self.pos += 1;
                Ok(n)
            }
            Some(Tok::Punct("(")) => {
                self.pos += 1;
                let v = self.or()?;
                if !self.eat(")") {
                    return Err("missing )".to_owned());
                }
                Ok(v)
            }
            other => Err(format!("unexpected {other:?}")),
        }
    }
}
