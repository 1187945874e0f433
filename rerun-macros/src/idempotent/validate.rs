//! The rules of contract sections 3 and 9 for an annotated function. Every violation is
//! collected, each spanned on its own tokens, so one build reports them all.

use proc_macro2::{TokenStream, TokenTree};
use quote::ToTokens;
use syn::visit::Visit;
use syn::{Expr, ExprAsync, ExprPath, Ident, Receiver, ReturnType, Type};

use super::args::{attr_span, Args};
use super::item::{self, FnItem, Param};
use crate::common::{self, Errors};

/// How the body is run.
pub enum Shape<'a> {
    Sync,
    Async,
    /// An `#[async_trait]` method: its `Box::pin(async move { … })`.
    AsyncTrait(&'a ExprAsync),
}

/// What the receiver is, for `reconcile`.
pub enum ReceiverUse<'a> {
    None,
    /// `&self` (or `self: &Self`): passed to the reconcile function as is.
    Shared(&'a Receiver),
}

/// A validated function, ready to expand.
pub struct Plan<'a> {
    pub shape: Shape<'a>,
    /// `Result<T, E>` as declared (for `#[async_trait]`, the boxed future's `Output`).
    pub ret: &'a Type,
    pub key: &'a Expr,
    /// The identifiers fingerprinted, in argument order, with their argument's `#[cfg]`s.
    pub payload: Vec<(&'a Ident, &'a [syn::Attribute])>,
    pub reconcile: Option<Reconcile<'a>>,
}

pub struct Reconcile<'a> {
    pub path: &'a ExprPath,
    pub receiver: ReceiverUse<'a>,
    pub params: &'a [Param],
}

pub fn check<'a>(
    args: &'a Args,
    item: &'a FnItem,
    params: &'a [Param],
    receiver: Option<&'a Receiver>,
    errors: &mut Errors,
) -> Option<Plan<'a>> {
    let sig = &item.sig;
    let name = &sig.ident;
    if let Some(constness) = &sig.constness {
        errors.spanned(
            constness,
            format!("`#[idempotent]` cannot go on a `const fn`, because its body runs through the store at run time; remove `const` from `const fn {name}`"),
        );
    }
    if item.body.is_none() {
        errors.spanned(
            item.semi.to_token_stream(),
            format!("`#[idempotent]` needs the body of `{name}`; put the attribute on the method in the `impl` block, or give this trait method a default body"),
        );
        return None;
    }

    let shape = match (sig.asyncness.is_some(), item.async_trait_block()) {
        (true, _) => Shape::Async,
        (false, Some(block)) => Shape::AsyncTrait(block),
        (false, None) => Shape::Sync,
    };
    let ret = return_type(item, &shape, errors);

    let key = match &args.key {
        Some(key) => {
            check_key(key, params, receiver, errors);
            Some(key)
        }
        None => {
            errors.at(
                attr_span(),
                format!("`#[idempotent]` on `{name}` needs a dedupe key: write `#[idempotent(key = …)]` with an expression over its arguments, such as `#[idempotent(key = order.id)]`"),
            );
            None
        }
    };

    let mut skipped: Vec<&Ident> = Vec::new();
    for ident in &args.skip {
        if ident == "self" {
            errors.spanned(
                ident,
                "the receiver is never part of the fingerprint; remove `self` from `skip(...)`",
            );
        } else if skipped.contains(&ident) {
            errors.spanned(
                ident,
                format!("`{ident}` is skipped twice; write `skip({ident})` once"),
            );
        } else if !params.iter().any(|p| p.idents.iter().any(|i| i == ident)) {
            let names: Vec<String> = params
                .iter()
                .flat_map(|p| p.idents.iter().map(|i| format!("`{i}`")))
                .collect();
            errors.spanned(
                ident,
                if names.is_empty() {
                    format!("`skip({ident})` names no argument of `{name}`, which has none; remove `skip({ident})`")
                } else {
                    format!("`skip({ident})` names no argument of `{name}`; its arguments are {}", names.join(", "))
                },
            );
        }
        skipped.push(ident);
    }
    // An argument that is the store itself (`store = store`, `store = &*store`) is never payload.
    let store_arg = args.store.as_ref().and_then(bare_name);
    let payload: Vec<(&Ident, &[syn::Attribute])> = params
        .iter()
        .flat_map(|p| p.idents.iter().map(|i| (i, &p.cfgs[..])))
        .filter(|(i, _)| !skipped.iter().any(|s| s == i) && store_arg.as_ref() != Some(*i))
        .collect();
    for param in params {
        let Some(first) = param
            .idents
            .iter()
            .find(|i| payload.iter().any(|(p, _)| p == i))
        else {
            continue;
        };
        if let Some(set) = common::hash_set_in(&param.ty) {
            errors.spanned(
                set,
                common::hash_set_error(
                    &format!("the argument `{first}`"),
                    &format!("leave it out of the fingerprint with `skip({first})`"),
                ),
            );
        }
    }

    let reconcile = match (&args.reconcile, &args.once) {
        (Some((word, _)), None) => {
            errors.spanned(
                word,
                "`reconcile` is only for `once` functions, since a replayable function simply runs again; add `once`, as in `#[idempotent(key = …, once, reconcile = check_charge)]`",
            );
            None
        }
        (Some((_, path)), Some(_)) => {
            for cfg in params.iter().flat_map(|p| &p.cfgs) {
                errors.spanned(
                    cfg,
                    "`reconcile` is called with every argument of the function, which cannot follow an argument under `#[cfg]`; give the argument in every configuration, or drop `reconcile`",
                );
            }
            check_reconcile(path, params, receiver, errors)
        }
        (None, _) => None,
    };
    if let (Some((word, _)), None) = (&args.settle, &args.reconcile) {
        errors.spanned(word, SETTLE_WITHOUT_RECONCILE);
    }

    if !errors.is_empty() {
        return None;
    }
    Some(Plan {
        shape,
        ret: ret?,
        key: key?,
        payload,
        reconcile,
    })
}

/// `settle` is read only on the way to a reconcile function.
const SETTLE_WITHOUT_RECONCILE: &str = "`settle` is how long a reconcile function waits for a dead attempt's effects to land, so it needs one; add it, as in `#[idempotent(key = …, once, reconcile = check_charge, settle = \"5s\")]`, or remove `settle`";

fn return_type<'a>(item: &'a FnItem, shape: &Shape<'a>, errors: &mut Errors) -> Option<&'a Type> {
    let name = &item.sig.ident;
    let declared = match (&item.sig.output, shape) {
        // `async_trait_block` found `Pin<Box<dyn Future<Output = …>>>` there.
        (output, Shape::AsyncTrait(_)) => item::boxed_future_output(output),
        (ReturnType::Type(_, ty), _) => Some(&**ty),
        (ReturnType::Default, _) => None,
    };
    // A `Box::pin(async move { … })` body under another return type (`BoxFuture<…>`,
    // `impl Future<…>`): a future written by hand.
    let by_hand = matches!(shape, Shape::Sync)
        && item
            .body
            .as_ref()
            .is_some_and(|b| item::boxed_async_block(b).is_some());
    match declared {
        // `Result<T, E>`, or a path that may name an alias of it (`Fallible<T>`, `MyResult`):
        // `T` and `E` are inferred from it by the runtime's bounds, which report a type that
        // is no `Result` at the return type.
        Some(ty) if !by_hand && may_be_result(ty) => Some(ty),
        Some(ty) => {
            let shown = ty.to_token_stream().to_string();
            let advice = if by_hand || names_future(ty) {
                // A future written by hand (`impl Future`, `Pin<Box<dyn Future>>`, `BoxFuture`):
                // the macro needs the `async fn` to wrap its body.
                format!("write it as `async fn {name}(…) -> Result<T, E>`")
            } else if let Type::Never(_) = ty {
                // `Result<!, E>` would need the unstable never type.
                "a function that never returns has no outcome to record; remove `#[idempotent]`, or return `Result<(), rerun_core::Error>` (or your own error type) when it is done".to_owned()
            } else {
                format!("write `-> Result<{shown}, rerun_core::Error>` or use your own error type")
            };
            errors.spanned(
                ty,
                format!("an #[idempotent] function returns `Result<T, E>` so that its `Ok` can be recorded and an `Err` retried, but `{name}` returns `{shown}`; {advice}"),
            );
            None
        }
        None => {
            errors.spanned(
                &item.sig,
                format!("an #[idempotent] function returns `Result<T, E>` so that its `Ok` can be recorded and an `Err` retried, but `{name}` returns nothing; write `-> Result<(), rerun_core::Error>` or use your own error type"),
            );
            None
        }
    }
}

/// Whether `ty` may be a `Result`: `Result<…>` by any path (`io::Result<T>`, `anyhow::Result<T>`),
/// or a path that may name an alias of it (`Fallible<T>`, `MyResult`, `<X as Op>::Output`). Not
/// a standard type a function commonly returns (`u64`, `String`, `Option<T>`, `Vec<T>`), a
/// future, or a type of another kind (`()`, `&T`, `[T]`, `impl Trait`, `!`): the macro refuses
/// those at once, with advice.
fn may_be_result(ty: &Type) -> bool {
    const STANDARD: [&str; 33] = [
        "bool", "char", "str", "String", "u8", "u16", "u32", "u64", "u128", "usize", "i8", "i16",
        "i32", "i64", "i128", "isize", "f32", "f64", "Option", "Vec", "VecDeque", "Box", "Arc",
        "Rc", "HashMap", "HashSet", "BTreeMap", "BTreeSet", "Cow", "Pin", "PathBuf", "Duration",
        "Ordering",
    ];
    match ty {
        Type::Path(p) => p.path.segments.last().is_some_and(|s| {
            s.ident == "Result" || (!STANDARD.iter().any(|n| s.ident == n) && !names_future(ty))
        }),
        Type::Group(g) => may_be_result(&g.elem),
        Type::Paren(p) => may_be_result(&p.elem),
        _ => false,
    }
}

/// Whether `ty` names a `Future` anywhere (`impl Future<…>`, `Pin<Box<dyn Future<…>>>`,
/// `BoxFuture<…>`).
fn names_future(ty: &Type) -> bool {
    struct Finds(bool);
    impl<'a> Visit<'a> for Finds {
        fn visit_path_segment(&mut self, s: &'a syn::PathSegment) {
            self.0 |= s.ident.to_string().ends_with("Future");
            syn::visit::visit_path_segment(self, s);
        }
    }
    let mut finds = Finds(false);
    finds.visit_type(ty);
    finds.0
}

/// A key must depend on the call: a key over none of the arguments would give every call one
/// record, unless it is a literal (a one-time step such as `key = "migrate-v3"`).
fn check_key(key: &Expr, params: &[Param], receiver: Option<&Receiver>, errors: &mut Errors) {
    if is_literal(key) {
        return;
    }
    let mut uses = Uses { names: Vec::new() };
    uses.visit_expr(key);
    let uses_arg = uses.names.iter().any(|n| {
        (n == "self" && receiver.is_some())
            || params.iter().any(|p| p.idents.iter().any(|i| i == n))
    });
    if !uses_arg {
        let shown = key.to_token_stream().to_string();
        errors.spanned(
            key,
            format!("the key `{shown}` uses none of the function's arguments, so every call would share one record; build it from an argument, as in `key = order.id`, or use a literal such as `key = \"migrate-v3\"` for a one-time step"),
        );
    }
}

/// The argument an expression merely refers to: `x`, `&x`, `&*x`, `(x)`.
fn bare_name(e: &Expr) -> Option<Ident> {
    match e {
        Expr::Path(p) if p.qself.is_none() => p.path.get_ident().cloned(),
        Expr::Reference(r) => bare_name(&r.expr),
        Expr::Unary(u) if matches!(u.op, syn::UnOp::Deref(_)) => bare_name(&u.expr),
        Expr::Paren(p) => bare_name(&p.expr),
        Expr::Group(g) => bare_name(&g.expr),
        _ => None,
    }
}

fn is_literal(e: &Expr) -> bool {
    match e {
        Expr::Lit(_) => true,
        Expr::Unary(u) => is_literal(&u.expr),
        Expr::Reference(r) => is_literal(&r.expr),
        Expr::Paren(p) => is_literal(&p.expr),
        Expr::Group(g) => is_literal(&g.expr),
        Expr::Tuple(t) => !t.elems.is_empty() && t.elems.iter().all(is_literal),
        _ => false,
    }
}

/// The single-segment names an expression mentions, including inside macro calls.
struct Uses {
    names: Vec<String>,
}

impl<'ast> Visit<'ast> for Uses {
    fn visit_expr_path(&mut self, p: &'ast ExprPath) {
        if p.qself.is_none() && p.path.segments.len() == 1 {
            if let Some(seg) = p.path.segments.first() {
                self.names.push(seg.ident.to_string());
            }
        }
        syn::visit::visit_expr_path(self, p);
    }
    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        fn walk(tokens: TokenStream, out: &mut Vec<String>) {
            for t in tokens {
                match t {
                    TokenTree::Ident(i) => out.push(i.to_string()),
                    TokenTree::Group(g) => walk(g.stream(), out),
                    // `format!("order-{id}")` names `id` inside its string.
                    TokenTree::Literal(l) => {
                        if let Ok(s) = syn::parse2::<syn::LitStr>(TokenTree::Literal(l).into()) {
                            captured(&s.value(), out);
                        }
                    }
                    _ => {}
                }
            }
        }
        walk(m.tokens.clone(), &mut self.names);
    }
}

/// The names a format string captures: `id` in `"{id}"`, `"{id:>8}"` or `"{id:?}"`; not in
/// `"{{id}}"` (escaped braces), `"{0}"` or `"{}"`.
fn captured(text: &str, out: &mut Vec<String>) {
    let mut rest = text;
    while let Some(open) = rest.find('{') {
        rest = &rest[open + 1..];
        if let Some(after) = rest.strip_prefix('{') {
            rest = after;
            continue;
        }
        let end = rest.find(['}', ':']).unwrap_or(rest.len());
        let name = rest[..end].trim();
        let mut chars = name.chars();
        let ident = chars.next().is_some_and(|c| c == '_' || c.is_alphabetic())
            && chars.all(|c| c == '_' || c.is_alphanumeric());
        if ident {
            out.push(name.strip_prefix("r#").unwrap_or(name).to_owned());
        }
        rest = &rest[end..];
    }
}

fn check_reconcile<'a>(
    path: &'a ExprPath,
    params: &'a [Param],
    receiver: Option<&'a Receiver>,
    errors: &mut Errors,
) -> Option<Reconcile<'a>> {
    let receiver = match receiver {
        None => ReceiverUse::None,
        Some(r) if matches!(&*r.ty, Type::Reference(t) if t.mutability.is_none()) => {
            ReceiverUse::Shared(r)
        }
        Some(r) => {
            errors.spanned(
                r,
                format!(
                    "`reconcile` is called with `&self` and the arguments before the body may run, which a `{}` method cannot lend; take `&self`, or move the check into a function of the arguments",
                    if r.reference.is_some() && r.mutability.is_some() { "&mut self" } else { "self" }
                ),
            );
            return None;
        }
    };
    let mut ok = true;
    for p in params {
        if p.simple.is_none() {
            errors.spanned(
                &p.pat,
                "`reconcile` is called with every argument, so each needs a name; write `point: (u32, u32)` and destructure it in the body",
            );
            ok = false;
        }
    }
    ok.then_some(Reconcile {
        path,
        receiver,
        params,
    })
}
