//! `#[idempotent(...)]`: grammar (`args`), the borrowed function (`item`), the rules
//! (`validate`) and the generated call of the runtime (`expand`).

mod args;
mod expand;
mod item;
mod validate;

use proc_macro2::TokenStream;
use syn::parse::Parser as _;

pub use item::FnItem;

use crate::common::Errors;

pub fn idempotent(attr: TokenStream, input: TokenStream) -> TokenStream {
    let mut errors = Errors::default();
    let mut item: FnItem = match syn::parse2(input.clone()) {
        Ok(item) => item,
        Err(_) => {
            errors.at(
                proc_macro2::Span::call_site(),
                "`#[idempotent]` goes on a function: `#[idempotent(key = order.id)] fn charge(order: &Order) -> Result<Receipt, PayError> { … }`",
            );
            let mut out = errors.to_compile_errors();
            out.extend(input);
            return out;
        }
    };
    item.strip_state_changing();
    // A second `#[idempotent]` would wrap the call in another with the same default scope and
    // key: the inner one would find the outer's claim and answer "in progress", always.
    for again in item
        .attrs
        .iter()
        .filter(|a| crate::common::attr_name(a).as_deref() == Some("idempotent"))
    {
        errors.spanned(
            again,
            "`#[idempotent]` is given twice on this function; keep one (a second would claim the key the first already holds)",
        );
    }
    let parser = |input: syn::parse::ParseStream| args::Args::parse(input, &mut errors);
    let args = match parser.parse2(attr) {
        Ok(args) => Some(args),
        Err(e) => {
            errors.push(e);
            None
        }
    };
    let (receiver, mut params) = item::params(&item.sig);
    if let Some(block) = item.async_trait_block() {
        item::restore_async_trait_patterns(&mut params, block);
    }
    let plan = args
        .as_ref()
        .and_then(|a| validate::check(a, &item, &params, receiver, &mut errors));
    match (&args, plan) {
        (Some(args), Some(plan)) if errors.is_empty() => expand::expand(args, &item, &plan),
        _ => {
            // The item is re-emitted unchanged so that the rest of the crate, and IDEs, still
            // see the function.
            let mut out = errors.to_compile_errors();
            out.extend(item.to_tokens_with(None));
            out
        }
    }
}

#[cfg(test)]
mod tests {
    use quote::quote;

    use super::idempotent;

    fn expand(attr: proc_macro2::TokenStream, item: proc_macro2::TokenStream) -> String {
        idempotent(attr, item).to_string()
    }

    #[test]
    fn reaches_the_runtime_through_one_path() {
        let out = expand(
            quote!(key = order.id),
            quote!(
                fn charge(order: &Order) -> Result<u64, E> {
                    Ok(1)
                }
            ),
        );
        assert!(
            out.contains(":: rerun_core :: __private :: call_with"),
            "{out}"
        );
        assert!(!out.contains("compile_error"), "{out}");
        let renamed = expand(
            quote!(key = order.id, crate = ::my::rr),
            quote!(
                fn charge(order: &Order) -> Result<u64, E> {
                    Ok(1)
                }
            ),
        );
        assert!(!renamed.contains("rerun_core"), "{renamed}");
        assert!(
            renamed.contains(":: my :: rr :: __private :: call_with"),
            "{renamed}"
        );
    }

    #[test]
    fn keeps_signature_attributes_and_docs() {
        let out = expand(
            quote!(key = id),
            quote!(
                /// Charges.
                #[inline]
                pub(crate) async fn charge<T: Clone>(id: u64, t: T) -> Result<u64, E>
                where
                    T: Send,
                {
                    Ok(id)
                }
            ),
        );
        assert!(out.starts_with("# [doc = r\" Charges.\"] # [inline] pub (crate) async fn charge < T : Clone > (id : u64 , t : T) -> Result < u64 , E > where T : Send"), "{out}");
    }

    #[test]
    fn durations_are_milliseconds_at_compile_time() {
        let out = expand(
            quote!(key = id, ttl = "7d", lease = "1m 30s", wait = "250ms"),
            quote!(
                fn f(id: u64) -> Result<u64, E> {
                    Ok(id)
                }
            ),
        );
        assert!(out.contains("options (:: core :: option :: Option :: Some (604800000u64) , :: core :: option :: Option :: Some (90000u64) , :: core :: option :: Option :: Some (250u64) , false , :: core :: option :: Option :: None)"), "{out}");
        let out = expand(
            quote!(key = id, once, reconcile = check, settle = "2s 500ms"),
            quote!(
                fn f(id: u64) -> Result<u64, E> {
                    Ok(id)
                }
            ),
        );
        assert!(
            out.contains(", true , :: core :: option :: Option :: Some (2500u64))"),
            "{out}"
        );
    }

    /// A tuple key borrows each part, at any depth; any other key is borrowed whole.
    #[test]
    fn tuple_keys_borrow_their_parts() {
        let out = expand(
            quote!(key = ((tenant, (order.customer, 7)))),
            quote!(
                fn f(tenant: String, order: &Order) -> Result<u64, E> {
                    Ok(1)
                }
            ),
        );
        assert!(
            out.contains(
                "call_with (__rerun_scope , & (& (tenant) , (& (order . customer) , & (7) ,) ,) ,"
            ),
            "{out}"
        );
        let out = expand(
            quote!(key = order.id),
            quote!(
                fn f(order: &Order) -> Result<u64, E> {
                    Ok(1)
                }
            ),
        );
        assert!(
            out.contains("call_with (__rerun_scope , & (order . id) ,"),
            "{out}"
        );
    }

    /// A return type that is not written `Result<…>` goes through a trait implemented for
    /// `Result` alone; one written `Result<…>` does not.
    #[test]
    fn aliases_of_result_are_converted() {
        let aliased = expand(
            quote!(key = id),
            quote!(
                fn f(id: u64) -> Fallible<u64> {
                    Ok(id)
                }
            ),
        );
        assert!(
            aliased.contains("< Fallible < u64 > as __RerunResult > :: from_result"),
            "{aliased}"
        );
        assert!(!aliased.contains("compile_error"), "{aliased}");
        let plain = expand(
            quote!(key = id),
            quote!(
                fn f(id: u64) -> io::Result<u64> {
                    Ok(id)
                }
            ),
        );
        assert!(!plain.contains("__RerunResult"), "{plain}");
        for refused in [
            quote!(u64),
            quote!(()),
            quote!(String),
            quote!(Option<u64>),
            quote!(&'static str),
        ] {
            let out = expand(
                quote!(key = id),
                quote!(
                    fn f(id: u64) -> #refused {
                        todo!()
                    }
                ),
            );
            assert!(out.contains("compile_error"), "{out}");
        }
    }

    /// No input makes the macro panic: malformed attributes and items become compile errors.
    #[test]
    fn never_panics() {
        let attrs = [
            quote!(),
            quote!(key),
            quote!(key =),
            quote!(key = ,),
            quote!(= x),
            quote!(key = a b c),
            quote!(,,,),
            quote!(key = id,),
            quote!(skip),
            quote!(skip()),
            quote!(skip(1, 2)),
            quote!(ttl = "", lease = "-1s", wait = "99999999999999999999y"),
            quote!(crate = 5),
            quote!(reconcile = 5, once),
            quote!(once(x)),
            quote!(key = id, key = id, key = id),
            quote!(scope = r#"x"#, key = "lit"),
            quote!(key = |x| x, store = {}),
        ];
        let items = [
            quote!(),
            quote!(fn),
            quote!(
                struct S;
            ),
            quote!(
                fn f();
            ),
            quote!(
                fn f() {}
            ),
            quote!(
                fn f(id: u64) -> Result<u64, E> {
                    Ok(id)
                }
            ),
            quote!(
                fn f((a, b): (u8, u8), _: u8) -> Result<u8, E> {
                    Ok(a + b)
                }
            ),
            quote!(
                fn f(self: Box<Self>, id: u64) -> Result<u8, E> {
                    Ok(1)
                }
            ),
            quote!(
                const unsafe extern "C" fn f(id: u64) -> impl Sized {
                    id
                }
            ),
            quote!(
                fn f(id: u64) -> Pin<Box<dyn Future<Output = Result<u8, E>> + Send>> {
                    Box::pin(async move { Ok(1) })
                }
            ),
            // As `#[async_trait]` writes `(a, b): (u8, u8), _: u8`, and half-written variants.
            quote!(
                fn f(
                    &self,
                    __arg1: (u8, u8),
                    __arg2: u8,
                ) -> Pin<Box<dyn Future<Output = Result<u8, E>> + Send>> {
                    Box::pin(async move {
                        let (a, b) = {
                            let __arg1 = __arg1;
                            __arg1
                        };
                        let __arg2 = __arg2;
                        let __arg3 = { __arg3 };
                        let () = {
                            let __arg4 = __arg4;
                        };
                        let __ret: Result<u8, E> = { Ok(a + b) };
                        __ret
                    })
                }
            ),
        ];
        for attr in &attrs {
            for item in &items {
                let _ = idempotent(attr.clone(), item.clone());
            }
        }
        for item in &items {
            let _ = crate::lint::state_changing(quote!(), item.clone());
            let _ = crate::lint::state_changing(quote!(x), item.clone());
            let _ = crate::lint::converges(quote!(), item.clone());
            let _ = crate::lint::converges(quote!("why"), item.clone());
            let _ = crate::lint::read_only(quote!(), item.clone());
            let _ = crate::derive::derive(item.clone());
        }
        for item in [
            quote!(
                struct S {
                    #[rerun]
                    a: u8,
                }
            ),
            quote!(
                struct S {
                    #[rerun = 1]
                    a: u8,
                }
            ),
            quote!(
                struct S {
                    #[rerun(key = 1)]
                    a: u8,
                }
            ),
            quote!(
                #[rerun(once = 1, reconcile)]
                struct S(#[rerun(key)] u8);
            ),
            quote!(
                enum E {}
            ),
            quote!(
                enum E {
                    A,
                    B(#[rerun(key)] u8),
                }
            ),
            quote!(union U { a: u8 }),
            quote!(
                #[rerun(ttl = 5)]
                struct S<'a, T: Clone>(#[rerun(key, skip)] &'a T);
            ),
        ] {
            let _ = crate::derive::derive(item);
        }
    }
}
