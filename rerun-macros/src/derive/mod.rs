//! `#[derive(Idempotent)]` with `#[rerun(...)]`: the model of the type (`attr`), its rules
//! (here), and the generated `impl Idempotent` (`expand`).

mod attr;
mod expand;

use proc_macro2::TokenStream;
use syn::DeriveInput;

use crate::common::Errors;

pub fn derive(input: TokenStream) -> TokenStream {
    let input: DeriveInput = match syn::parse2(input) {
        Ok(input) => input,
        Err(e) => return e.to_compile_error(),
    };
    let mut errors = Errors::default();
    let model = attr::model(&input, &mut errors);
    let name = &input.ident;
    if model.is_enum && model.variants.is_empty() {
        errors.spanned(
            name,
            format!("`{name}` has no variants, so no value of it can be handled; `#[derive(Idempotent)]` needs variants with a `#[rerun(key)]` field"),
        );
    }
    for v in &model.variants {
        if v.fields.iter().any(|f| f.key) {
            continue;
        }
        match &v.ident {
            None => errors.at(
                v.span,
                format!("`#[derive(Idempotent)]` needs a dedupe key: mark the field that identifies a `{name}` with `#[rerun(key)]`, as in `#[rerun(key)] event_id: String`"),
            ),
            Some(variant) => errors.at(
                v.span,
                format!("variant `{variant}` has no key field; mark the field that identifies it with `#[rerun(key)]`, as in `{variant} {{ #[rerun(key)] id: String, … }}`"),
            ),
        }
    }
    if errors.is_empty() {
        expand::expand(&input, &model)
    } else {
        let mut out = errors.to_compile_errors();
        out.extend(expand::stub(&input, model.container.krate.as_ref()));
        out
    }
}
