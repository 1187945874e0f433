//! Code generation for `#[idempotent]`: the signature is kept, the body becomes one call of
//! the runtime (`__private::drive_*`) with the key, the payload fingerprint, the options and the
//! original body (a closure for sync functions, an `async` block for async ones).

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned, ToTokens};
use syn::spanned::Spanned as _;

use super::args::Args;
use super::item::{self, FnItem};
use super::validate::{Plan, ReceiverUse, Reconcile, Shape};
use crate::common::{self, local, respan, runtime};

pub fn expand(args: &Args, item: &FnItem, plan: &Plan) -> TokenStream {
    let rt = runtime(args.krate.as_ref());
    let call = local("__rerun_call");
    let given = local("__rerun_given");
    let body = match &item.body {
        Some(body) => body,
        None => return item.to_tokens_with(None),
    };

    let scope = Scope::new(&rt, args, item::params(&item.sig).0.is_some());
    let call_stmt = {
        let scope = &scope.expr;
        let key = key_arg(plan.key);
        let payload = payload(&rt, plan);
        let options = options(&rt, args);
        quote!(let #call = #rt::call_with(#scope, #key, #payload, #options);)
    };
    // `let` keeps a temporary store (`store = &self.store.clone()`) alive for the whole call.
    let (store_stmt, store_arg) = match &args.store {
        Some(store) => (
            quote!(let #given = #store;),
            quote_spanned!(store.span()=> #rt::given_store(#given)),
        ),
        None => (TokenStream::new(), quote!(#rt::global())),
    };
    let reconcile = plan.reconcile.as_ref().map(|r| Reconciling::new(&rt, r));
    let slot_stmt = reconcile.as_ref().map(|r| r.slot_stmt.clone());
    let rebind = reconcile.as_ref().map(|r| r.rebind.clone());
    let is_async = !matches!(plan.shape, Shape::Sync);
    let (bind_patterns, trait_stmts) = match &plan.shape {
        Shape::AsyncTrait(block) => async_trait_stmts(&block.block.stmts, plan),
        _ => (TokenStream::new(), Vec::new()),
    };

    let alias = (!names_result(plan.ret)).then(|| Alias::new(plan.ret, &item.sig.ident));

    // The body, as a closure or a future that the runtime starts only if this call claims the key.
    let user_body = match &plan.shape {
        Shape::Sync => {
            let ret = item::erase_impl_trait(plan.ret);
            let stmts = &body.stmts;
            quote!(|| -> #ret { #rebind #(#stmts)* })
        }
        Shape::Async => {
            let ret = item::erase_impl_trait(plan.ret);
            let stmts = &body.stmts;
            let fake = local("__rerun_ret");
            // A return that is never taken, at the declared type: it pins the block's output so
            // that `?` and `Ok(…)` in the body infer as they do in the function.
            quote!(async {
                if let ::core::option::Option::Some(#fake) = ::core::option::Option::None::<#ret> {
                    return #fake;
                }
                #rebind
                #(#stmts)*
            })
        }
        Shape::AsyncTrait(_) => {
            // `#[async_trait]` already pinned the output type inside its block.
            let stmts = &trait_stmts;
            quote!(async { #rebind #(#stmts)* })
        }
    };
    // Through an alias, the runtime sees the `Result` it stands for.
    let user_body = match (&alias, &plan.shape) {
        (None, _) => user_body,
        // Spanned on the return type, so that the block's type is reported there too.
        (Some(alias), Shape::Sync) => {
            let into = &alias.into;
            quote_spanned!(alias.span=> || #into((#user_body)()))
        }
        (Some(alias), _) => {
            let into = &alias.into;
            quote_spanned!(alias.span=> async { #into(#user_body.await) })
        }
    };

    let ret_span = plan.ret.span();
    // Spanned on the return type: "`Receipt` must implement `Serialize`" and "`PayError` must
    // implement `From<rerun_core::Error>`" point there.
    let drive = respan(
        match (&reconcile, is_async) {
            (None, false) => quote!(#rt::drive_sync),
            (None, true) => quote!(#rt::drive_async),
            (Some(_), false) => quote!(#rt::drive_sync_reconciled),
            (Some(_), true) => quote!(#rt::drive_async_reconciled),
        },
        ret_span,
    );
    let reconcile_arg = reconcile.as_ref().map(|r| {
        let f = if is_async { &r.future } else { &r.closure };
        quote!(#f,)
    });
    let await_ = is_async.then(|| quote!(.await));
    // The call's parentheses carry the span too, so the whole call expression is the return
    // type's; the arguments inside keep theirs.
    let mut drive_args = proc_macro2::Group::new(
        proc_macro2::Delimiter::Parenthesis,
        quote!(#store_arg, #call, #reconcile_arg #user_body),
    );
    drive_args.set_span(ret_span);
    let mut driven = quote!(#drive #drive_args #await_);
    let mut alias_items = TokenStream::new();
    if let Some(alias) = alias {
        // The `.await` and the call on the return type too: a type that is no `Result` is
        // reported there alone.
        let (from, span) = (alias.from, alias.span);
        let await_ = is_async.then(|| quote_spanned!(span=> .await));
        driven = quote_spanned!(span=> #from(#drive #drive_args #await_));
        alias_items = alias.items;
    }
    let run = quote! {
        #call_stmt
        #store_stmt
        #slot_stmt
        #driven
    };

    // The default scope's marker goes at the top level of the function's own body: declared
    // inside the `async move` block of `#[async_trait]` or a closure, its path would not be the
    // method's.
    let scope_stmt = &scope.stmt;
    let stmts = match &plan.shape {
        Shape::AsyncTrait(_) => {
            // Keep `#[async_trait]`'s `Box::pin(…)` and run inside its `async move` block, where
            // the arguments (and `self`, not yet renamed) are in scope, and the bindings of the
            // arguments written as patterns once they are bound, as in a native `async fn`.
            let func = match body.stmts.first() {
                Some(syn::Stmt::Expr(syn::Expr::Call(c), _)) => c.func.to_token_stream(),
                _ => quote!(#rt::std::boxed::Box::pin),
            };
            quote!(#scope_stmt #func(async move { #alias_items #bind_patterns #run }))
        }
        _ => quote!(#alias_items #scope_stmt #run),
    };
    item.to_tokens_with(Some(stmts))
}

/// Whether a return type is written `Result<…>` (by any path: `io::Result<T>`, `anyhow::Result<T>`,
/// a local `Result<T>` alias): the runtime's bounds read `T` and `E` from it as they are.
fn names_result(ty: &syn::Type) -> bool {
    match ty {
        syn::Type::Path(p) => {
            p.qself.is_none() && p.path.segments.last().is_some_and(|s| s.ident == "Result")
        }
        syn::Type::Group(g) => names_result(&g.elem),
        syn::Type::Paren(p) => names_result(&p.elem),
        _ => false,
    }
}

/// A return type that may be an alias of `Result` (`Fallible<T>`, `MyResult`): the value of the
/// body and the call's go through a trait of the function's own implemented for
/// `Result<T, E>` alone. The runtime sees `Result<T, E>` with `T` and `E` read from the alias,
/// and a type that is no `Result` fails that one bound, at the return type, with advice.
struct Alias {
    /// The return type's.
    span: proc_macro2::Span,
    /// The trait and its one implementation, for the top of the function's body.
    items: TokenStream,
    /// A function from the declared type to its `Result`.
    into: TokenStream,
    /// A function from the `Result` to the declared type.
    from: TokenStream,
}

impl Alias {
    fn new(ret: &syn::Type, name: &syn::Ident) -> Alias {
        let span = ret.span();
        let conv = local("__RerunResult");
        let shown = ret.to_token_stream().to_string();
        let message = format!("an #[idempotent] function returns `Result<T, E>` so that its `Ok` can be recorded and an `Err` retried, but `{name}` returns `{shown}`, which is no `Result`");
        let label = "not a `Result`, nor an alias of one";
        let note = format!("write `-> Result<{shown}, rerun_core::Error>` or use your own error type; an alias of `Result` is fine");
        let items = quote! {
            #[diagnostic::on_unimplemented(message = #message, label = #label, note = #note)]
            trait #conv: ::core::marker::Sized {
                type Ok;
                type Err;
                fn into_result(self) -> ::core::result::Result<Self::Ok, Self::Err>;
                fn from_result(result: ::core::result::Result<Self::Ok, Self::Err>) -> Self;
            }
            impl<T, E> #conv for ::core::result::Result<T, E> {
                type Ok = T;
                type Err = E;
                #[inline(always)]
                fn into_result(self) -> ::core::result::Result<T, E> {
                    self
                }
                #[inline(always)]
                fn from_result(result: ::core::result::Result<T, E>) -> Self {
                    result
                }
            }
        };
        // Both name the declared type with one span: a type that is no `Result` is one error.
        let ret = item::erase_impl_trait(ret);
        let into = respan(quote!(<#ret as #conv>::into_result), span);
        let from = respan(quote!(<#ret as #conv>::from_result), span);
        Alias {
            span,
            items,
            into,
            from,
        }
    }
}

/// The statements of an `#[async_trait]` block, which begin by moving each argument into the
/// block (`let id = id;`) and then compute `let __ret: R = { body };`. An argument the body
/// does not use but the key or the fingerprint does would be reported unused at that move:
/// each fingerprinted plain argument is borrowed once, just before `__ret`.
///
/// The statements that bind an argument written as a pattern (`let (a, b) = …__arg1…;`) are
/// returned apart, to run before the key and the fingerprint, which may name `a` and `b`.
fn async_trait_stmts(stmts: &[syn::Stmt], plan: &Plan) -> (TokenStream, Vec<TokenStream>) {
    let (patterns, stmts): (Vec<&syn::Stmt>, Vec<&syn::Stmt>) = stmts
        .iter()
        .partition(|stmt| matches!(item::positional_binding(stmt), Some((_, Some(_)))));
    let ret_at = stmts.iter().position(|stmt| {
        matches!(stmt, syn::Stmt::Local(syn::Local { pat: syn::Pat::Type(syn::PatType { pat, .. }), .. })
            if matches!(&**pat, syn::Pat::Ident(p) if p.ident == "__ret"))
    });
    let mut out: Vec<TokenStream> = stmts.iter().map(ToTokens::to_token_stream).collect();
    if let Some(at) = ret_at {
        let moved = |ident: &syn::Ident| {
            stmts[..at].iter().any(|stmt| {
                matches!(stmt, syn::Stmt::Local(syn::Local { pat: syn::Pat::Ident(p), init: Some(init), .. })
                    if p.ident == *ident && matches!(&*init.expr, syn::Expr::Path(e) if e.path.is_ident(ident)))
            })
        };
        let touches = plan
            .payload
            .iter()
            .filter(|(ident, _)| moved(ident))
            .map(|(ident, cfgs)| quote!(#(#cfgs)* let _ = &#ident;));
        out.splice(at..at, touches);
    }
    (quote!(#(#patterns)*), out)
}

/// The scope of the call: `scope = "…"` as written, or the function's path, read at run time
/// from the compiler's name for a function nested in it (see `rerun_core::scope`).
struct Scope {
    /// A statement for the top of the function's body (none for `scope = "…"`).
    stmt: TokenStream,
    /// A `&'static str`.
    expr: TokenStream,
}

impl Scope {
    /// `method`: the function has a `self` receiver, so `Self` names its type (and, in a
    /// trait's default body, the implementing type, which the scope then names).
    fn new(rt: &TokenStream, args: &Args, method: bool) -> Scope {
        if let Some(lit) = &args.scope {
            return Scope {
                stmt: TokenStream::new(),
                expr: lit.to_token_stream(),
            };
        }
        let scope = local("__rerun_scope");
        let marker = local("__rerun_scope_marker");
        let cell = local("__RERUN_SCOPE");
        // `type_name` of the marker is this function's path followed by the marker's name (a
        // block adds no segment to it); the `static` computes the scope once, on the first call.
        // Declared in a block of their own, the items stay out of reach of the user's body.
        let get = match method {
            true => quote!(#cell.get_for::<Self, _>(#marker)),
            false => quote!(#cell.get(#marker)),
        };
        Scope {
            stmt: quote! {
                let #scope: &'static str = {
                    fn #marker() {}
                    static #cell: #rt::DefaultScope = #rt::DefaultScope::new();
                    #get
                };
            },
            expr: scope.to_token_stream(),
        }
    }
}

/// The key as `call_with` borrows it, spanned on the key expression (so a type that is no key is
/// reported there): `&(key)`, or for a tuple, at any depth, a borrowed tuple of borrows,
/// `&(&a, (&b, &c))`. A tuple written as a value would move the arguments it names (out of a
/// borrow, `(order.customer, order.seq)`, or before the fingerprint reads them, `(tenant, id)`);
/// a reference encodes as the value it points to, so the key is the same.
fn key_arg(key: &syn::Expr) -> TokenStream {
    let span = key.span();
    match tuple_of(key) {
        Some(_) => {
            let borrowed = borrowed(key);
            quote_spanned!(span=> &#borrowed)
        }
        None => quote_spanned!(span=> &(#key)),
    }
}

/// The tuple an expression is, seen through parentheses and invisible groups: `(a, b)`,
/// `((a, b))`. The unit `()` is no tuple of parts.
fn tuple_of(e: &syn::Expr) -> Option<&syn::ExprTuple> {
    match e {
        syn::Expr::Tuple(t) if !t.elems.is_empty() => Some(t),
        syn::Expr::Paren(p) => tuple_of(&p.expr),
        syn::Expr::Group(g) => tuple_of(&g.expr),
        _ => None,
    }
}

/// A part of a key, borrowed: `&(e)`, or a tuple of borrowed parts.
fn borrowed(e: &syn::Expr) -> TokenStream {
    match tuple_of(e) {
        Some(t) => {
            let parts = t.elems.iter().map(borrowed);
            let mut out = TokenStream::new();
            t.paren_token
                .surround(&mut out, |out| out.extend(quote!(#(#parts,)*)));
            out
        }
        None => quote_spanned!(e.span()=> &(#e)),
    }
}

fn payload(rt: &TokenStream, plan: &Plan) -> TokenStream {
    if plan.payload.is_empty() {
        return quote!(::core::option::Option::None);
    }
    // Each argument is added on its own, spanned on it: a non-`Serialize` argument is reported
    // there, once, with the runtime's message.
    if plan.payload.iter().all(|(_, cfgs)| cfgs.is_empty()) {
        let args = plan
            .payload
            .iter()
            .map(|(ident, _)| quote_spanned!(ident.span()=> .arg(&#ident)));
        return quote!(::core::option::Option::Some(#rt::Payload::new() #(#args)*));
    }
    // An argument under `#[cfg(…)]` is added under the same `#[cfg]`: configured away, it
    // is neither there nor fingerprinted.
    let payload = local("__rerun_payload");
    let args = plan.payload.iter().map(|(ident, cfgs)| {
        let add = quote_spanned!(ident.span()=> let #payload = #payload.arg(&#ident););
        quote!(#(#cfgs)* #add)
    });
    quote!(::core::option::Option::Some({
        let #payload = #rt::Payload::new();
        #(#args)*
        #payload
    }))
}

fn options(rt: &TokenStream, args: &Args) -> TokenStream {
    // Not given: `Options::new()`'s, which the runtime alone knows.
    let ttl = common::optional_ms(args.ttl.as_ref().map(|(_, m)| m));
    let lease = common::optional_ms(args.lease.as_ref().map(|(_, m)| m));
    let wait = common::optional_ms(args.wait.as_ref().map(|(_, m)| m));
    let once = args.once.is_some();
    let settle = common::optional_ms(args.settle.as_ref().map(|(_, m)| m));
    // Built in a const: the durations were parsed by the macro, nothing is left for run time.
    quote!({
        const __RERUN_OPTIONS: #rt::Options = #rt::options(#ttl, #lease, #wait, #once, #settle);
        __RERUN_OPTIONS
    })
}

/// The pieces of a `once` function with `reconcile`: the arguments go into a slot that the
/// reconcile function borrows from and the body takes from, one after the other.
struct Reconciling {
    slot_stmt: TokenStream,
    closure: TokenStream,
    future: TokenStream,
    rebind: TokenStream,
}

impl Reconciling {
    fn new(rt: &TokenStream, r: &Reconcile) -> Reconciling {
        let slot = local("__rerun_args");
        let simple: Vec<_> = r.params.iter().filter_map(|p| p.simple.as_ref()).collect();
        let names: Vec<_> = simple.iter().map(|s| &s.ident).collect();
        let locals: Vec<_> = (0..names.len())
            .map(|i| local(&format!("__rerun_arg{i}")))
            .collect();
        // The user's `mut x` stays meaningful: the body rebinds `mut x`; this keeps the outer
        // binding from warning that its `mut` is unused.
        let touch_mut = simple.iter().filter(|s| s.mutable).map(|s| {
            let ident = &s.ident;
            quote!(let _ = &mut #ident;)
        });
        let slot_stmt = quote! {
            #(#touch_mut)*
            let #slot = #rt::Args::new((#(#names,)*));
        };
        let (taken, error) = (local("__rerun_taken"), local("__rerun_error"));
        let take = quote! {
            match #slot.take() {
                ::core::result::Result::Ok(#taken) => #taken,
                ::core::result::Result::Err(#error) => {
                    return ::core::result::Result::Err(::core::convert::From::from(#error))
                }
            }
        };
        let receiver = match &r.receiver {
            ReceiverUse::Shared(recv) => {
                let token = &recv.self_token;
                quote!(#token,)
            }
            ReceiverUse::None => TokenStream::new(),
        };
        let path = r.path;
        let ret = local("__rerun_ret");
        let call = quote!(#path(#receiver #(&#locals),*));
        let closure = quote!(|| {
            let (#(#locals,)*) = #take;
            let #ret = #call;
            #slot.put((#(#locals,)*));
            #ret
        });
        let future = quote!(async {
            let (#(#locals,)*) = #take;
            let #ret = #call.await;
            #slot.put((#(#locals,)*));
            #ret
        });
        let pats = simple.iter().map(|s| {
            let ident = &s.ident;
            if s.mutable {
                quote!(mut #ident)
            } else {
                quote!(#ident)
            }
        });
        let rebind = quote! {
            #[allow(unused_variables)]
            let (#(#pats,)*) = #take;
        };
        Reconciling {
            slot_stmt,
            closure,
            future,
            rebind,
        }
    }
}
