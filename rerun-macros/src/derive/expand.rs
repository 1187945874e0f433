//! Code generation for `#[derive(Idempotent)]`: an `impl Idempotent` whose key is the scope and
//! the `#[rerun(key)]` fields, and whose fingerprint covers the fields not marked `skip`.

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::{DeriveInput, Member};

use super::attr::{Model, Variant};
use crate::common::{local, optional_ms, respan, runtime, tuple};

/// `IntoKey` is implemented for tuples of up to eight parts.
const KEY_TUPLE: usize = 8;

pub fn expand(input: &DeriveInput, model: &Model) -> TokenStream {
    let rt = runtime(model.container.krate.as_ref());
    let name = &input.ident;
    let generics = bounded(&rt, input, model);
    let (impl_generics, ty_generics, where_clause) = generics.split_for_impl();
    let scope = match &model.container.scope {
        Some(lit) => quote!(#lit),
        None => {
            let name = format!("::{name}");
            quote!(::core::concat!(::core::module_path!(), #name))
        }
    };

    let (key_body, fingerprint_body) = if model.is_enum {
        let key_arms = model
            .variants
            .iter()
            .map(|v| arm(v, |b| key_of(&rt, &scope, v, b)));
        let fp_arms = model
            .variants
            .iter()
            .map(|v| arm(v, |b| payload_of(&rt, v, b)));
        (
            quote!(match self { #(#key_arms)* }),
            quote!(match self { #(#fp_arms)* }),
        )
    } else {
        let v = &model.variants[0];
        let bindings = self_fields(v);
        (
            key_of(&rt, &scope, v, &bindings),
            payload_of(&rt, v, &bindings),
        )
    };

    let c = &model.container;
    let ttl = optional_ms(c.ttl.as_ref());
    let lease = optional_ms(c.lease.as_ref());
    let wait = optional_ms(c.wait.as_ref());
    let once = c.once.is_some();
    let settle = optional_ms(c.settle.as_ref().map(|(_, m)| m));
    let reconcile = c.reconcile.as_ref().map(|(_, path)| {
        // The call and the expected type are spanned on the path, so that a function of the
        // wrong shape is reported there; `self` and the local keep their own spans, or inside a
        // `macro_rules!` that passes the path in, hygiene would hide them from the method.
        let span = syn::spanned::Spanned::span(path);
        let result = local("__rerun_result");
        let expected = respan(
            quote!(::core::result::Result<#rt::Reconciled<_>, _>),
            span,
        );
        let this = quote!(self);
        let call = quote_spanned!(span=> #path(#this));
        quote! {
            fn __reconcile(&self) -> ::core::option::Option<#rt::std::boxed::Box<dyn ::core::any::Any>> {
                // The shape is checked here, at compile time: `fn(&Self) -> Result<Reconciled<_>, _>`.
                let #result: #expected = #call;
                #rt::boxed_reconcile(#result)
            }
            fn __has_reconcile(&self) -> bool {
                true
            }
            fn __reconcile_type(&self) -> ::core::option::Option<(::core::any::TypeId, &'static str)> {
                ::core::option::Option::Some(#rt::reconcile_type::<Self, _>(#path))
            }
        }
    });

    quote! {
        const _: () = {
            #[automatically_derived]
            impl #impl_generics #rt::Idempotent for #name #ty_generics #where_clause {
                fn idempotency_key(&self) -> #rt::Key {
                    #key_body
                }
                fn fingerprint(&self) -> ::core::result::Result<#rt::Fingerprint, #rt::Error> {
                    #fingerprint_body
                }
                fn options(&self) -> #rt::Options {
                    const __RERUN_OPTIONS: #rt::Options = #rt::options(#ttl, #lease, #wait, #once, #settle);
                    __RERUN_OPTIONS
                }
                #reconcile
            }
        };
    }
}

/// The type's generics with what the impl needs of its parameters, as serde's derive adds its
/// own: each fingerprinted field whose type names a type parameter is `Serialize`, and each key
/// field of that kind is a key (`IntoKey`). Fields of concrete types need no bound (and keep
/// their errors at the field).
fn bounded(rt: &TokenStream, input: &DeriveInput, model: &Model) -> syn::Generics {
    let mut generics = input.generics.clone();
    let params: Vec<&syn::Ident> = input.generics.type_params().map(|p| &p.ident).collect();
    if params.is_empty() {
        return generics;
    }
    let names_param = |ty: &syn::Type| {
        struct Finds<'a>(&'a [&'a syn::Ident], bool);
        impl<'a> syn::visit::Visit<'_> for Finds<'a> {
            fn visit_path(&mut self, path: &syn::Path) {
                if path.leading_colon.is_none()
                    && path
                        .segments
                        .first()
                        .is_some_and(|s| self.0.contains(&&s.ident))
                {
                    self.1 = true;
                }
                syn::visit::visit_path(self, path);
            }
        }
        let mut finds = Finds(&params, false);
        syn::visit::Visit::visit_type(&mut finds, ty);
        finds.1
    };
    let mut predicates: Vec<syn::WherePredicate> = Vec::new();
    for field in model.variants.iter().flat_map(|v| &v.fields) {
        let ty = &field.ty;
        if !names_param(ty) {
            continue;
        }
        if !field.skip {
            predicates.push(syn::parse_quote!(#ty: #rt::serde::Serialize));
        }
        if field.key {
            predicates.push(syn::parse_quote!(#ty: #rt::IntoKey));
        }
    }
    generics.make_where_clause().predicates.extend(predicates);
    generics
}

/// After an error: an impl whose bodies are never compiled into a program (the build fails on
/// the error), so that uses of the trait do not add a cascade of errors.
pub fn stub(input: &DeriveInput, krate: Option<&syn::Path>) -> TokenStream {
    let rt = runtime(krate);
    let name = &input.ident;
    let (impl_generics, ty_generics, where_clause) = input.generics.split_for_impl();
    quote! {
        const _: () = {
            impl #impl_generics #rt::Idempotent for #name #ty_generics #where_clause {
                fn idempotency_key(&self) -> #rt::Key { ::core::unreachable!() }
                fn fingerprint(&self) -> ::core::result::Result<#rt::Fingerprint, #rt::Error> { ::core::unreachable!() }
                fn options(&self) -> #rt::Options { ::core::unreachable!() }
            }
        };
    }
}

/// How each field is reached: `&self.name` in a struct, a binding in an enum's match arm.
fn self_fields(v: &Variant) -> Vec<TokenStream> {
    // `self` keeps the derive's span: spanned on a field that a `macro_rules!` caller named, it
    // would be the caller's `self`, which hygiene keeps out of this method (rust-lang/rust#121558).
    let this = quote!(self);
    v.fields
        .iter()
        .map(|f| {
            let m = &f.member;
            quote_spanned!(f.span=> &#this.#m)
        })
        .collect()
}

fn arm(v: &Variant, body: impl FnOnce(&[TokenStream]) -> TokenStream) -> TokenStream {
    let ident = v.ident.as_ref();
    let bindings: Vec<syn::Ident> = (0..v.fields.len())
        .map(|i| format_ident!("__rerun_f{}", i, span = Span::mixed_site()))
        .collect();
    let members: Vec<&Member> = v.fields.iter().map(|f| &f.member).collect();
    let pattern = if v.named {
        quote!(Self::#ident { #(#members: #bindings),* })
    } else if v.fields.is_empty() {
        quote!(Self::#ident)
    } else {
        quote!(Self::#ident(#(#bindings),*))
    };
    let refs: Vec<TokenStream> = bindings.iter().map(|b| quote!(#b)).collect();
    let body = body(&refs);
    quote!(#pattern => { #body })
}

fn key_of(
    rt: &TokenStream,
    scope: &TokenStream,
    v: &Variant,
    fields: &[TokenStream],
) -> TokenStream {
    let mut parts: Vec<TokenStream> = v
        .fields
        .iter()
        .zip(fields)
        .filter(|(f, _)| f.key)
        .map(|(f, access)| quote_spanned!(f.span=> #access))
        .collect();
    if let Some(ident) = &v.ident {
        // A variant's name is part of its key: `Paid { id: 1 }` and `Refunded { id: 1 }` are
        // two events.
        let name = ident.to_string();
        parts.insert(0, quote!(#name));
    }
    let key = match parts.as_slice() {
        [one] => one.clone(),
        _ => {
            let t = tuple(&parts, KEY_TUPLE);
            quote!(&#t)
        }
    };
    quote!(#rt::key(#scope, #key))
}

fn payload_of(rt: &TokenStream, v: &Variant, fields: &[TokenStream]) -> TokenStream {
    let variant = v.ident.as_ref().map(|i| {
        let name = i.to_string();
        quote!(.arg(#name))
    });
    let args = v
        .fields
        .iter()
        .zip(fields)
        .filter(|(f, _)| !f.skip)
        .map(|(f, access)| quote_spanned!(f.span=> .arg(#access)));
    quote! {
        #rt::Payload::new() #variant #(#args)*
            .finish(|| #rt::Idempotent::idempotency_key(self))
    }
}
