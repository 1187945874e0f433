//! The annotated function, borrowed as written: attributes, visibility, signature, body.
//!
//! Free functions, inherent and trait-impl methods and default methods of traits all have this
//! shape; `#[async_trait]` methods arrive already rewritten to return a boxed future, and are
//! recognised by that return type and their `Box::pin(async move { … })` body.

use proc_macro2::TokenStream;
use quote::{quote, ToTokens};
use syn::parse::{Parse, ParseStream};
use syn::visit::Visit;
use syn::{
    Attribute, Block, Expr, ExprAsync, FnArg, GenericArgument, Ident, Pat, PathArguments, Receiver,
    ReturnType, Signature, Stmt, Token, Type, TypeParamBound, Visibility,
};

use crate::common::attr_name;

/// A function item with or without a body (a trait method declaration has none).
pub struct FnItem {
    pub attrs: Vec<Attribute>,
    pub vis: Visibility,
    pub defaultness: Option<Token![default]>,
    pub sig: Signature,
    pub body: Option<Body>,
    pub semi: Option<Token![;]>,
}

pub struct Body {
    pub brace: syn::token::Brace,
    pub inner_attrs: Vec<Attribute>,
    pub stmts: Vec<Stmt>,
}

impl Parse for FnItem {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let attrs = input.call(Attribute::parse_outer)?;
        let vis = input.parse()?;
        let defaultness = input.parse()?;
        let sig = input.parse()?;
        let (body, semi) = if input.peek(Token![;]) {
            (None, Some(input.parse()?))
        } else {
            let content;
            let brace = syn::braced!(content in input);
            let inner_attrs = content.call(Attribute::parse_inner)?;
            let stmts = content.call(Block::parse_within)?;
            (
                Some(Body {
                    brace,
                    inner_attrs,
                    stmts,
                }),
                None,
            )
        };
        Ok(FnItem {
            attrs,
            vis,
            defaultness,
            sig,
            body,
            semi,
        })
    }
}

impl FnItem {
    /// Marks `#[state_changing]` as satisfied: an `#[idempotent]` or `#[converges]` function is
    /// the proof, whichever attribute comes first. The attribute stays (so its `use` is still
    /// used) but runs with the marker and checks nothing.
    pub fn strip_state_changing(&mut self) {
        for attr in &mut self.attrs {
            if attr_name(attr).as_deref() == Some("state_changing") {
                let path = attr.path().clone();
                let marker = crate::lint::SATISFIED;
                let marker = proc_macro2::Ident::new(marker, proc_macro2::Span::call_site());
                attr.meta = syn::parse_quote!(#path(#marker));
            }
        }
    }

    /// The item with `stmts` as its body (or its own body when `None`).
    pub fn to_tokens_with(&self, stmts: Option<TokenStream>) -> TokenStream {
        let FnItem {
            attrs,
            vis,
            defaultness,
            sig,
            body,
            semi,
        } = self;
        let block = match body {
            Some(body) => {
                let inner = &body.inner_attrs;
                let stmts = match stmts {
                    Some(s) => s,
                    None => {
                        let own = &body.stmts;
                        quote!(#(#own)*)
                    }
                };
                let mut out = TokenStream::new();
                body.brace.surround(&mut out, |out| {
                    out.extend(quote!(#(#inner)*));
                    out.extend(stmts);
                });
                out
            }
            None => semi.to_token_stream(),
        };
        quote!(#(#attrs)* #vis #defaultness #sig #block)
    }
}

/// One named argument of the function.
pub struct Param {
    /// The identifiers the argument binds (one for `order: &Order`, several for a pattern).
    pub idents: Vec<Ident>,
    /// `Some` when the argument is a plain name (`order` or `mut order`).
    pub simple: Option<SimpleParam>,
    pub pat: Pat,
    pub ty: Type,
    /// The argument's `#[cfg(…)]` attributes: an attribute macro sees arguments before they
    /// are configured away, so what it writes about one must carry them too.
    pub cfgs: Vec<Attribute>,
}

pub struct SimpleParam {
    pub ident: Ident,
    pub mutable: bool,
}

/// The receiver and the other arguments.
pub fn params(sig: &Signature) -> (Option<&Receiver>, Vec<Param>) {
    let mut receiver = None;
    let mut out = Vec::new();
    for input in &sig.inputs {
        match input {
            FnArg::Receiver(r) => receiver = Some(r),
            FnArg::Typed(t) => {
                let mut idents = Vec::new();
                collect_idents(&t.pat, &mut idents);
                let simple = match &*t.pat {
                    Pat::Ident(p) if p.by_ref.is_none() && p.subpat.is_none() => {
                        Some(SimpleParam {
                            ident: p.ident.clone(),
                            mutable: p.mutability.is_some(),
                        })
                    }
                    _ => None,
                };
                out.push(Param {
                    idents,
                    simple,
                    pat: (*t.pat).clone(),
                    ty: (*t.ty).clone(),
                    cfgs: t
                        .attrs
                        .iter()
                        .filter(|a| a.path().is_ident("cfg"))
                        .cloned()
                        .collect(),
                });
            }
        }
    }
    (receiver, out)
}

fn collect_idents(pat: &Pat, out: &mut Vec<Ident>) {
    struct Binds<'a>(&'a mut Vec<Ident>);
    impl<'ast> Visit<'ast> for Binds<'_> {
        fn visit_pat_ident(&mut self, p: &'ast syn::PatIdent) {
            self.0.push(p.ident.clone());
            syn::visit::visit_pat_ident(self, p);
        }
    }
    Binds(out).visit_pat(pat);
}

impl FnItem {
    /// The async block of an `#[async_trait]` method: a fn, not `async`, that returns
    /// `Pin<Box<dyn Future<Output = …>>>` with the body `Box::pin(async move { … })`.
    pub fn async_trait_block(&self) -> Option<&ExprAsync> {
        if self.sig.asyncness.is_some() {
            return None;
        }
        boxed_future_output(&self.sig.output)?;
        boxed_async_block(self.body.as_ref()?)
    }
}

/// `async_trait`'s statement that binds an argument it renamed: it gives an argument written as
/// a pattern the positional name `__argN` and binds the pattern at the top of its block,
/// `let (a, b) = { let __arg1 = __arg1; __arg1 };`, or for `_`, `let __arg2 = __arg2;`.
/// Returns `__argN` and the pattern (`None` for `_`).
pub fn positional_binding(stmt: &Stmt) -> Option<(&Ident, Option<&Pat>)> {
    let Stmt::Local(local) = stmt else {
        return None;
    };
    let init = local.init.as_ref().filter(|i| i.diverge.is_none())?;
    if let Some(positional) = moved_positional(&local.pat, &init.expr) {
        return Some((positional, None));
    }
    let Expr::Block(block) = &*init.expr else {
        return None;
    };
    let [Stmt::Local(inner), Stmt::Expr(Expr::Path(last), None)] = block.block.stmts.as_slice()
    else {
        return None;
    };
    let inner_init = inner.init.as_ref().filter(|i| i.diverge.is_none())?;
    let positional = moved_positional(&inner.pat, &inner_init.expr)?;
    last.path
        .is_ident(positional)
        .then_some((positional, Some(&local.pat)))
}

/// `let __argN = __argN;`
fn moved_positional<'a>(pat: &'a Pat, expr: &Expr) -> Option<&'a Ident> {
    let (Pat::Ident(p), Expr::Path(e)) = (pat, expr) else {
        return None;
    };
    let plain = p.by_ref.is_none() && p.mutability.is_none() && p.subpat.is_none();
    let positional = p
        .ident
        .to_string()
        .strip_prefix("__arg")
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
    (plain && positional && e.qself.is_none() && e.path.is_ident(&p.ident)).then_some(&p.ident)
}

/// Gives the arguments that `#[async_trait]` renamed `__argN` back their patterns (see
/// [`positional_binding`]), so that they mean what they mean in a native `async fn`: `_` is
/// no argument to fingerprint, and a pattern's bindings are the names the key, `skip` and the
/// fingerprint see.
pub fn restore_async_trait_patterns(params: &mut [Param], block: &ExprAsync) {
    for (positional, pat) in block.block.stmts.iter().filter_map(positional_binding) {
        let Some(param) = params
            .iter_mut()
            .find(|p| p.simple.as_ref().is_some_and(|s| s.ident == *positional))
        else {
            continue;
        };
        param.simple = None;
        param.idents.clear();
        match pat {
            Some(pat) => {
                collect_idents(pat, &mut param.idents);
                param.pat = pat.clone();
            }
            None => {
                param.pat = Pat::Wild(syn::PatWild {
                    attrs: Vec::new(),
                    underscore_token: Token![_](positional.span()),
                });
            }
        }
    }
}

/// `Box::pin(async move { … })`, the body `#[async_trait]` writes (and some hand-written
/// futures have).
pub fn boxed_async_block(body: &Body) -> Option<&ExprAsync> {
    let [Stmt::Expr(Expr::Call(call), None)] = body.stmts.as_slice() else {
        return None;
    };
    let Expr::Path(func) = &*call.func else {
        return None;
    };
    let names: Vec<String> = func
        .path
        .segments
        .iter()
        .map(|s| s.ident.to_string())
        .collect();
    if !names.ends_with(&["Box".to_owned(), "pin".to_owned()]) || call.args.len() != 1 {
        return None;
    }
    match call.args.first() {
        Some(Expr::Async(block)) if block.capture.is_some() => Some(block),
        _ => None,
    }
}

/// The `Output` of `Pin<Box<dyn Future<Output = R> + …>>`, the return type `#[async_trait]`
/// writes.
pub fn boxed_future_output(ret: &ReturnType) -> Option<&Type> {
    let ReturnType::Type(_, ty) = ret else {
        return None;
    };
    let pin = generic_of(ty, "Pin")?;
    let boxed = generic_of(pin, "Box")?;
    let Type::TraitObject(object) = boxed else {
        return None;
    };
    object.bounds.iter().find_map(|b| {
        let TypeParamBound::Trait(t) = b else {
            return None;
        };
        let last = t.path.segments.last()?;
        if last.ident != "Future" {
            return None;
        }
        let PathArguments::AngleBracketed(args) = &last.arguments else {
            return None;
        };
        args.args.iter().find_map(|a| match a {
            GenericArgument::AssocType(assoc) if assoc.ident == "Output" => Some(&assoc.ty),
            _ => None,
        })
    })
}

fn generic_of<'a>(ty: &'a Type, name: &str) -> Option<&'a Type> {
    let Type::Path(p) = ty else {
        return None;
    };
    let last = p.path.segments.last()?;
    if last.ident != name {
        return None;
    }
    let PathArguments::AngleBracketed(args) = &last.arguments else {
        return None;
    };
    args.args.iter().find_map(|a| match a {
        GenericArgument::Type(t) => Some(t),
        _ => None,
    })
}

/// The return type with every `impl Trait` replaced by `_`, usable as a closure's return type
/// (where `impl Trait` is not allowed) while still pinning what can be pinned.
pub fn erase_impl_trait(ty: &Type) -> Type {
    struct Erase;
    impl syn::visit_mut::VisitMut for Erase {
        fn visit_type_mut(&mut self, ty: &mut Type) {
            if let Type::ImplTrait(t) = ty {
                *ty = Type::Infer(syn::TypeInfer {
                    underscore_token: Token![_](
                        proc_macro2::Span::call_site()
                            .located_at(syn::spanned::Spanned::span(&t.impl_token)),
                    ),
                });
                return;
            }
            syn::visit_mut::visit_type_mut(self, ty);
        }
    }
    let mut ty = ty.clone();
    syn::visit_mut::VisitMut::visit_type_mut(&mut Erase, &mut ty);
    ty
}
