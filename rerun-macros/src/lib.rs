//! Procedural macros of rerun-core.
use proc_macro::TokenStream;
#[proc_macro_attribute]
pub fn idempotent(_a: TokenStream, i: TokenStream) -> TokenStream { i }
#[proc_macro_attribute]
pub fn state_changing(_a: TokenStream, i: TokenStream) -> TokenStream { i }
#[proc_macro_attribute]
pub fn converges(_a: TokenStream, i: TokenStream) -> TokenStream { i }
#[proc_macro_attribute]
pub fn read_only(_a: TokenStream, i: TokenStream) -> TokenStream { i }
#[proc_macro_derive(Idempotent, attributes(rerun))]
pub fn derive_idempotent(_i: TokenStream) -> TokenStream { TokenStream::new() }
