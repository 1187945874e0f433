//! What the three macros share: the one path to the runtime, error collection, the argument
//! grammar `name`, `name = value`, `name(a, b)`, and compile-time durations.

use std::time::Duration;

use proc_macro2::{Span, TokenStream};
use quote::{quote, ToTokens};
use syn::ext::IdentExt as _;
use syn::parse::{ParseStream, Parser as _};
use syn::punctuated::Punctuated;
use syn::{Attribute, Error, Expr, ExprPath, Ident, LitStr, Path, Token};

/// The one place generated code names the runtime: `::rerun_core::__private`, or
/// `<crate = path>::__private` for a renamed dependency.
pub fn runtime(krate: Option<&Path>) -> TokenStream {
    match krate {
        Some(path) => quote!(#path::__private),
        None => quote!(::rerun_core::__private),
    }
}

/// A local of generated code. `mixed_site` hygiene keeps it out of reach of the user's body,
/// and keeps the user's own names from shadowing it.
pub fn local(name: &str) -> Ident {
    Ident::new(name, Span::mixed_site())
}

/// Every error of one item, reported together.
#[derive(Default)]
pub struct Errors(Vec<Error>);

impl Errors {
    pub fn push(&mut self, error: Error) {
        self.0.push(error);
    }
    pub fn spanned(&mut self, tokens: impl ToTokens, message: impl std::fmt::Display) {
        self.0.push(Error::new_spanned(tokens, message));
    }
    pub fn at(&mut self, span: Span, message: impl std::fmt::Display) {
        self.0.push(Error::new(span, message));
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    pub fn to_compile_errors(&self) -> TokenStream {
        self.0.iter().map(Error::to_compile_error).collect()
    }
}

/// What an argument name takes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `once`
    Flag,
    /// `key = order.id`
    Expr,
    /// `reconcile = check_charge`
    Path,
    /// `crate = ::rerun_core` (a module path)
    ModPath,
    /// `ttl = "24h"`
    Str,
    /// `skip(db, clock)`
    List,
}

/// One known argument: its name, what it takes, and how it is written (for messages).
pub struct Known {
    pub name: &'static str,
    pub kind: Kind,
    pub example: &'static str,
}

/// A parsed argument value.
pub enum Value {
    Flag,
    Expr(Box<Expr>),
    Path(Box<ExprPath>),
    ModPath(Path),
    Str(LitStr),
    List(Vec<Ident>),
}

pub struct Arg {
    pub name: Ident,
    pub value: Value,
}

/// Parses `a, b = x, c(y, z)` against `known`. Unknown and malformed arguments are reported
/// into `errors` and skipped, so that one build shows every mistake; only tokens that cannot
/// be skipped at all end the parse.
pub fn parse_args(
    input: ParseStream,
    what: &str,
    known: &[Known],
    errors: &mut Errors,
) -> syn::Result<Vec<Arg>> {
    let mut args = Vec::new();
    while !input.is_empty() {
        let name = Ident::parse_any(input)?;
        let spelled = name.to_string();
        match known.iter().find(|k| k.name == spelled) {
            Some(k) => {
                if let Some(value) = parse_value(input, &name, k, errors)? {
                    args.push(Arg { name, value });
                }
            }
            None => {
                errors.spanned(&name, unknown_message(&spelled, what, known));
                skip_value(input)?;
            }
        }
        if input.is_empty() {
            break;
        }
        if !input.peek(Token![,]) {
            return Err(input.error(format!(
                "expected `,` between the arguments of `{what}`, as in `{}`",
                examples(known, 2)
            )));
        }
        input.parse::<Token![,]>()?;
    }
    Ok(args)
}

/// Parses the arguments of a helper attribute such as `#[rerun(key)]`.
pub fn parse_attr_args(
    attr: &Attribute,
    what: &str,
    known: &[Known],
    errors: &mut Errors,
) -> Vec<Arg> {
    let parser = |input: ParseStream| parse_args(input, what, known, errors);
    let tokens = match &attr.meta {
        syn::Meta::List(list) => list.tokens.clone(),
        syn::Meta::Path(path) => {
            let first = known.first().map(|k| k.example).unwrap_or("key");
            errors.spanned(
                path,
                format!("`{what}` needs an argument in parentheses, such as `{what}({first})`"),
            );
            return Vec::new();
        }
        syn::Meta::NameValue(nv) => {
            let first = known.first().map(|k| k.example).unwrap_or("key");
            errors.spanned(
                nv,
                format!("`{what}` takes its arguments in parentheses, such as `{what}({first})`"),
            );
            return Vec::new();
        }
    };
    match parser.parse2(tokens) {
        Ok(args) => args,
        Err(e) => {
            errors.push(e);
            Vec::new()
        }
    }
}

fn parse_value(
    input: ParseStream,
    name: &Ident,
    known: &Known,
    errors: &mut Errors,
) -> syn::Result<Option<Value>> {
    let example = known.example;
    if known.kind == Kind::Flag {
        if input.peek(Token![=]) || input.peek(syn::token::Paren) {
            errors.spanned(
                name,
                format!("`{name}` is a flag and takes no value: write just `{example}`"),
            );
            skip_value(input)?;
            return Ok(None);
        }
        return Ok(Some(Value::Flag));
    }
    if known.kind == Kind::List {
        if !input.peek(syn::token::Paren) {
            errors.spanned(
                name,
                format!("`{name}` takes a list of argument names: `{example}`"),
            );
            skip_value(input)?;
            return Ok(None);
        }
        let content;
        syn::parenthesized!(content in input);
        let names =
            Punctuated::<Ident, Token![,]>::parse_terminated_with(&content, Ident::parse_any)?;
        return Ok(Some(Value::List(names.into_iter().collect())));
    }
    if !input.peek(Token![=]) {
        errors.spanned(name, format!("`{name}` needs a value: `{example}`"));
        skip_value(input)?;
        return Ok(None);
    }
    input.parse::<Token![=]>()?;
    Ok(Some(match known.kind {
        Kind::Expr => Value::Expr(Box::new(input.parse()?)),
        Kind::Path => Value::Path(Box::new(input.parse()?)),
        Kind::ModPath => Value::ModPath(Path::parse_mod_style(input)?),
        Kind::Str => {
            if input.peek(LitStr) {
                Value::Str(input.parse()?)
            } else {
                let other: Expr = input.parse()?;
                errors.spanned(&other, format!("`{name}` takes a string: `{example}`"));
                return Ok(None);
            }
        }
        Kind::Flag | Kind::List => return Ok(None),
    }))
}

/// Skips what follows an argument name up to the next top-level comma.
fn skip_value(input: ParseStream) -> syn::Result<()> {
    if input.peek(Token![=]) {
        input.parse::<Token![=]>()?;
        input.parse::<Expr>()?;
    } else if input.peek(syn::token::Paren) {
        let _content;
        syn::parenthesized!(_content in input);
    }
    Ok(())
}

fn examples(known: &[Known], n: usize) -> String {
    known
        .iter()
        .take(n)
        .map(|k| k.example)
        .collect::<Vec<_>>()
        .join(", ")
}

fn unknown_message(spelled: &str, what: &str, known: &[Known]) -> String {
    let closest = known
        .iter()
        .map(|k| (distance(spelled, k.name), k))
        .filter(|(d, _)| *d <= 2)
        .min_by_key(|(d, _)| *d);
    match closest {
        Some((_, k)) => format!(
            "`{spelled}` is not an argument of `{what}`; did you mean `{}`?",
            k.example
        ),
        None => format!(
            "`{spelled}` is not an argument of `{what}`; use one of {}",
            known
                .iter()
                .map(|k| format!("`{}`", k.example))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// Levenshtein distance, for "did you mean" suggestions.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = if ca == *cb {
                prev
            } else {
                1 + prev.min(cur).min(row[j])
            };
            prev = cur;
        }
    }
    row[b.len()]
}

/// Reports a second occurrence of an argument; returns whether it was the first.
pub fn first_time(
    seen: &mut Vec<String>,
    name: &Ident,
    example: &str,
    errors: &mut Errors,
) -> bool {
    let spelled = name.to_string();
    if seen.contains(&spelled) {
        errors.spanned(
            name,
            format!("`{spelled}` is given twice; keep one `{example}` and remove this one"),
        );
        false
    } else {
        seen.push(spelled);
        true
    }
}

/// A duration argument in milliseconds, parsed at compile time.
pub struct Millis {
    pub ms: u64,
}

/// An optional duration as generated code: `Some(ms)` or `None`.
pub fn optional_ms(m: Option<&Millis>) -> TokenStream {
    match m {
        Some(m) => {
            let ms = m.ms;
            quote!(::core::option::Option::Some(#ms))
        }
        None => quote!(::core::option::Option::None),
    }
}

/// The longest `ttl`, `lease`, `wait` or `settle`: 100 years of 365 days, as the runtime
/// checks it.
pub const MAX_DURATION_SECS: u64 = 3_153_600_000;
/// The shortest `lease` in milliseconds, as the runtime checks it.
pub const MIN_LEASE_MS: u64 = 100;

/// Parses a humantime duration (`"24h"`, `"30s"`, `"7d"`, `"1h 30m"`) at compile time, and
/// checks it against the limits the runtime enforces: every duration at most
/// [`MAX_DURATION_SECS`], a `lease` at least [`MIN_LEASE_MS`], a `ttl` greater than zero.
pub fn duration(lit: &LitStr, name: &str) -> Result<Millis, Error> {
    let text = lit.value();
    let fail = |message: String| Error::new(lit.span(), message);
    let parsed = humantime::parse_duration(text.trim()).map_err(|e| {
        fail(format!(
            "`{name} = {text:?}` is not a duration ({e}); write it like `{name} = \"30s\"`, `\"24h\"` or `\"7d\"`"
        ))
    })?;
    if parsed > Duration::from_secs(MAX_DURATION_SECS) {
        return Err(fail(format!(
            "`{name} = {text:?}` is longer than the maximum duration of 100 years of 365 days; write `{name} = \"36500d\"` or less"
        )));
    }
    if name == "lease" && parsed < Duration::from_millis(MIN_LEASE_MS) {
        return Err(fail(format!(
            "`lease = {text:?}` is below the minimum lease of {MIN_LEASE_MS}ms: a lease must outlast a store round trip and a scheduling stall; write `lease = \"{MIN_LEASE_MS}ms\"` or more"
        )));
    }
    if name == "ttl" && parsed.is_zero() {
        return Err(fail(format!(
            "`ttl = {text:?}` would keep no record, so every retry would run the body again: a ttl must be greater than zero; write `ttl = \"24h\"` or another positive duration"
        )));
    }
    // Whole milliseconds, a fraction rounded up: `ttl = "500us"` is 1ms, not zero.
    let ms = parsed.as_millis() + u128::from(parsed.subsec_nanos() % 1_000_000 != 0);
    let ms = u64::try_from(ms).map_err(|_| {
        fail(format!(
            "`{name} = {text:?}` is too long; write `{name} = \"36500d\"` or less"
        ))
    })?;
    Ok(Millis { ms })
}

/// The longest scope in bytes, as `rerun_core::scope::MAX_SCOPE_BYTES`.
pub const MAX_SCOPE_BYTES: usize = 512;

/// What is wrong with a scope, in the words of `rerun_core::scope::validate_scope` (the rule
/// the runtime applies: 1 to 512 bytes, not blank, no control character), or `None`.
pub fn scope_problem(scope: &str) -> Option<String> {
    if scope.is_empty() {
        return Some(
            "a scope cannot be empty: it names the operation; write `scope = \"billing.charge\"`"
                .to_owned(),
        );
    }
    if scope.trim().is_empty() {
        return Some(
            "a scope cannot be blank: it names the operation; write `scope = \"billing.charge\"`"
                .to_owned(),
        );
    }
    if scope.len() > MAX_SCOPE_BYTES {
        return Some(format!(
            "a scope is at most {MAX_SCOPE_BYTES} bytes long and this one has {} bytes; name the operation briefly, as in `scope = \"billing.charge\"`",
            scope.len()
        ));
    }
    let (at, c) = scope.char_indices().find(|(_, c)| c.is_control())?;
    Some(format!(
        "a scope cannot contain control characters and this one has `{}` at byte {at}; remove it, as in `scope = \"billing.charge\"`",
        c.escape_default()
    ))
}

/// Checks a literal `scope = "…"` against the runtime's rule, with the error on the literal.
pub fn check_scope(lit: &LitStr, errors: &mut Errors) {
    let scope = lit.value();
    if let Some(problem) = scope_problem(&scope) {
        errors.spanned(lit, problem);
    }
}

/// Nests `items` into tuples of at most `max` elements (serde and `IntoKey` implement tuples up
/// to a fixed length).
pub fn tuple(items: &[TokenStream], max: usize) -> TokenStream {
    if items.len() <= max {
        return quote!((#(#items,)*));
    }
    let chunks: Vec<TokenStream> = items.chunks(max).map(|c| tuple(c, max)).collect();
    tuple(&chunks, max)
}

/// The last segment of an attribute's path: `idempotent` for `#[rerun_core::idempotent(...)]`.
pub fn attr_name(attr: &Attribute) -> Option<String> {
    attr.path().segments.last().map(|s| s.ident.to_string())
}

/// `tokens` with every span set to `span`: generated code whose trait-bound errors should point
/// at the user's tokens (the return type, an argument) instead of at the attribute.
///
/// `$crate` (from a `crate = $crate::…` written in a `macro_rules!`) keeps its span: the span is
/// what tells the compiler which crate it names.
pub fn respan(tokens: TokenStream, span: Span) -> TokenStream {
    tokens
        .into_iter()
        .map(|mut t| {
            match &t {
                proc_macro2::TokenTree::Group(g) => {
                    let mut group =
                        proc_macro2::Group::new(g.delimiter(), respan(g.stream(), span));
                    group.set_span(span);
                    t = group.into();
                }
                proc_macro2::TokenTree::Ident(i) if i == "$crate" => {}
                _ => t.set_span(span),
            }
            t
        })
        .collect()
}

/// The first `HashSet` named in `ty` (`HashSet<T>`, `&HashSet<T>`, `Vec<HashSet<T>>`, or
/// `std::collections::HashSet<T, S>`), if any.
///
/// serde writes a set as a list, in its iteration order, and a `HashSet`'s order changes from
/// one set to another (each has its own random hasher): two equal sets would have two
/// fingerprints, and an honest retry would be refused as a different payload. A map's entries
/// are sorted by the fingerprint, but a list's order is meaningful and kept, so a set can only be
/// told apart here, by its type's name.
pub fn hash_set_in(ty: &syn::Type) -> Option<&syn::PathSegment> {
    struct Find<'a>(Option<&'a syn::PathSegment>);
    impl<'a> syn::visit::Visit<'a> for Find<'a> {
        fn visit_path_segment(&mut self, segment: &'a syn::PathSegment) {
            if self.0.is_none() && segment.ident == "HashSet" {
                self.0 = Some(segment);
            }
            syn::visit::visit_path_segment(self, segment);
        }
    }
    let mut find = Find(None);
    syn::visit::Visit::visit_type(&mut find, ty);
    find.0
}

/// The error for a fingerprinted `HashSet` ([`hash_set_in`]): `what` is the argument or field,
/// `leave_out` how to leave it out of the fingerprint.
pub fn hash_set_error(what: &str, leave_out: &str) -> String {
    format!("{what} holds a `HashSet`, which lists its items in a different order in every set, so two equal sets would have different fingerprints and a retry would be refused as a different payload; use a `BTreeSet` (or a sorted `Vec`), or {leave_out}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lit(text: &str) -> LitStr {
        LitStr::new(text, Span::call_site())
    }

    fn ms(name: &str, text: &str) -> Result<u64, String> {
        duration(&lit(text), name)
            .map(|m| m.ms)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn durations_within_the_limits() {
        assert_eq!(ms("ttl", "24h"), Ok(86_400_000));
        assert_eq!(ms("ttl", "36500d"), Ok(MAX_DURATION_SECS * 1000));
        assert_eq!(ms("ttl", "500us"), Ok(1));
        assert_eq!(ms("lease", "1s"), Ok(1000));
        assert_eq!(ms("wait", "0s"), Ok(0));
        assert_eq!(ms("wait", "1500us"), Ok(2));
    }

    #[test]
    fn durations_beyond_the_limits() {
        let long = ms("ttl", "300y").unwrap_err();
        assert!(
            long.contains("maximum duration of 100 years") && long.contains("`ttl = \"36500d\"`"),
            "{long}"
        );
        // humantime's years have 365.25 days.
        assert!(ms("wait", "100y").is_err());
        assert!(ms("lease", "36501d").is_err());
        let short = ms("lease", "50ms").unwrap_err();
        assert_eq!(short, "`lease = \"50ms\"` is below the minimum lease of 100ms: a lease must outlast a store round trip and a scheduling stall; write `lease = \"100ms\"` or more");
        assert!(ms("lease", "99ms").is_err());
        assert_eq!(ms("lease", "100ms"), Ok(100));
        assert_eq!(ms("lease", "500ms"), Ok(500));
        assert!(ms("lease", "0s").is_err());
        let zero = ms("ttl", "0s").unwrap_err();
        assert!(zero.contains("greater than zero"), "{zero}");
        assert!(ms("ttl", "99999999999999999999y").is_err());
    }

    /// The macros and the runtime say the same about a scope.
    #[test]
    fn scope_rule_is_the_runtime_rule() {
        assert_eq!(MAX_SCOPE_BYTES, rerun_core::scope::MAX_SCOPE_BYTES);
        for scope in [
            "",
            " ",
            "billing.charge",
            "billing\ncharge",
            "a\0",
            "tab\there",
            "\u{85}",
            "\u{7f}x",
            "é",
            &"a".repeat(512),
            &"a".repeat(513),
            &"é".repeat(257),
        ] {
            assert_eq!(
                scope_problem(scope),
                rerun_core::scope::validate_scope(scope).err(),
                "{scope:?}"
            );
        }
    }
}
