//! The compile-time lint (contract section 9): `#[state_changing]` on functions and `impl`
//! blocks, satisfied by `#[idempotent(key = …)]`, `#[converges("…")]` or, on a method of a
//! state-changing `impl`, `#[read_only]`.
//!
//! Attribute order does not matter: when `#[state_changing]` runs first it sees the other
//! attributes still in place; when `#[idempotent]` or `#[converges]` runs first, it is itself the
//! proof and removes `#[state_changing]` from the function it re-emits.

use proc_macro2::{Span, TokenStream};
use quote::{quote, ToTokens};
use syn::{Attribute, ImplItem, Item, LitStr};

use crate::common::{attr_name, Errors};
use crate::idempotent::FnItem;

/// Which attribute, if any, answers "is it safe to run twice?".
fn satisfied(attrs: &[Attribute], in_impl: bool) -> bool {
    attrs.iter().any(|a| {
        matches!(attr_name(a).as_deref(), Some("idempotent" | "converges"))
            || (in_impl && attr_name(a).as_deref() == Some("read_only"))
    })
}

/// The argument with which `#[idempotent]`, `#[converges]` and `#[read_only]` leave
/// `#[state_changing]` on a function they already satisfy (or reported on).
pub const SATISFIED: &str = "__rerun_satisfied";

pub fn state_changing(attr: TokenStream, input: TokenStream) -> TokenStream {
    let mut errors = Errors::default();
    if attr.to_string() == SATISFIED {
        return input;
    }
    if !attr.is_empty() {
        errors.spanned(
            &attr,
            "`#[state_changing]` takes no arguments; write `#[state_changing]` and give the function `#[idempotent(key = …)]` or `#[converges(\"…\")]`",
        );
    }
    let out = match syn::parse2::<Item>(input.clone()) {
        Ok(Item::Impl(mut block)) => {
            for item in &mut block.items {
                if let ImplItem::Macro(m) = item {
                    // The methods a macro writes appear only after this attribute has run.
                    let name = m
                        .mac
                        .path
                        .segments
                        .last()
                        .map_or_else(String::new, |s| s.ident.to_string());
                    errors.spanned(
                        &m.mac,
                        format!("`#[state_changing]` on this `impl` block cannot see the methods that `{name}!` writes, so it cannot check them; call `{name}!` in an `impl` block of its own, and mark each state-changing method it writes on its own: `#[state_changing]` with `#[idempotent(key = …)]` or `#[converges(\"why running it twice is safe\")]`"),
                    );
                }
                if let ImplItem::Fn(f) = item {
                    // A nested `#[state_changing]` on a method is redundant under the block's.
                    f.attrs
                        .retain(|a| attr_name(a).as_deref() != Some("state_changing"));
                    if !satisfied(&f.attrs, true) {
                        let name = &f.sig.ident;
                        errors.spanned(
                            name,
                            format!("`{name}` is in a `#[state_changing]` impl but has no dedupe key; add `#[idempotent(key = …)]`, or `#[converges(\"why running it twice is safe\")]`, or mark it `#[read_only]`"),
                        );
                    }
                }
            }
            block.into_token_stream()
        }
        _ => match syn::parse2::<FnItem>(input.clone()) {
            Ok(f) => {
                if !satisfied(&f.attrs, false) {
                    let name = &f.sig.ident;
                    errors.spanned(
                        name,
                        format!("`{name}` changes state but has no dedupe key; add `#[idempotent(key = …)]` with a key over its arguments, or `#[converges(\"why running it twice is safe\")]` if running it twice is harmless"),
                    );
                }
                f.to_tokens_with(None)
            }
            Err(_) => {
                errors.at(
                    Span::call_site(),
                    "`#[state_changing]` goes on a function or an `impl` block: `#[state_changing] fn send_email(…)` or `#[state_changing] impl Mailer { … }`",
                );
                input
            }
        },
    };
    let mut tokens = errors.to_compile_errors();
    tokens.extend(out);
    tokens
}

pub fn converges(attr: TokenStream, input: TokenStream) -> TokenStream {
    let mut errors = Errors::default();
    let example = "`#[converges(\"sets the flag; setting it twice is harmless\")]`";
    if attr.is_empty() {
        errors.at(
            Span::call_site(),
            format!(
                "`#[converges]` needs the reason running the function twice is safe: {example}"
            ),
        );
    } else {
        match syn::parse2::<LitStr>(attr.clone()) {
            Ok(reason) if reason.value().trim().is_empty() => errors.spanned(
                &reason,
                format!("the reason of `#[converges]` is empty; say why running the function twice is safe: {example}"),
            ),
            Ok(_) => {}
            Err(_) => errors.spanned(
                &attr,
                format!("`#[converges]` takes one string, the reason running the function twice is safe: {example}"),
            ),
        }
    }
    reemit_fn(input, errors, "#[converges(\"…\")]")
}

pub fn read_only(attr: TokenStream, input: TokenStream) -> TokenStream {
    let mut errors = Errors::default();
    if !attr.is_empty() {
        errors.spanned(
            &attr,
            "`#[read_only]` takes no arguments; write `#[read_only]`",
        );
    }
    match syn::parse2::<FnItem>(input.clone()) {
        Ok(mut f) => {
            if let Some(sc) = f
                .attrs
                .iter()
                .find(|a| attr_name(a).as_deref() == Some("state_changing"))
            {
                errors.spanned(
                    sc,
                    format!("`{}` cannot be both `#[read_only]` and `#[state_changing]`; keep the one that is true", f.sig.ident),
                );
            }
            // Reported once, here: the lint need not add "no dedupe key".
            f.strip_state_changing();
            let mut tokens = errors.to_compile_errors();
            tokens.extend(f.to_tokens_with(None));
            tokens
        }
        Err(_) => reemit_fn(input, errors, "#[read_only]"),
    }
}

/// Re-emits a function (without `#[state_changing]`, which it satisfies) after its errors.
fn reemit_fn(input: TokenStream, mut errors: Errors, attr: &str) -> TokenStream {
    let item = match syn::parse2::<FnItem>(input.clone()) {
        Ok(mut f) => {
            f.strip_state_changing();
            f.to_tokens_with(None)
        }
        Err(_) => {
            errors.at(
                Span::call_site(),
                format!("`{attr}` goes on a function or a method"),
            );
            input
        }
    };
    let errors = errors.to_compile_errors();
    quote!(#errors #item)
}
