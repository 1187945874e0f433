//! Scopes: the namespace a key lives in, named by `scope = "…"` or derived from where the
//! annotated function is defined.
//!
//! A scope is 1 to [`MAX_SCOPE_BYTES`] bytes of UTF-8 without control characters
//! ([`validate_scope`]); the macros check a literal `scope = "…"` against the same rule at
//! compile time.
//!
//! Without `scope = "…"`, `#[idempotent]` uses the path of the function: the module path and
//! the function's name for a free function (`billing::charge`); for a method, the `impl`'s self
//! type and, in a trait impl, the trait (`billing::Ledger::post`,
//! `<billing::SendReceipt as billing::Handler>::handle`), so two types' methods of one name
//! never share records. A trait's default body, whose path names the trait, is scoped as the
//! implementing type's impl would be (`<billing::SendReceipt as billing::Handler>::handle`,
//! with the type's generic arguments, so `Page<u8>` and `Page<String>` are two scopes); an
//! associated function without a `self` receiver cannot name that type, so a default body of
//! one is shared by every implementor: give it `scope = "…"`. So is the default body of a
//! generic trait among the impls of one type (`impl Tr<A> for X` and `impl Tr<B> for X` both
//! run `<X as Tr>::method`: the compiler names the trait without its arguments there). That
//! path comes from the compiler (`std::any::type_name`), which does
//! not promise to keep its format from release to release: an explicit scope keeps records
//! valid across renames, moves and compiler upgrades.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::{OnceLock, RwLock};

/// The longest scope, in bytes.
pub const MAX_SCOPE_BYTES: usize = 512;

/// Checks that `scope` is a valid scope: 1 to [`MAX_SCOPE_BYTES`] bytes, not blank, no control character
/// (`char::is_control`: tabs, newlines, NUL, escape sequences). The message says what is wrong
/// and how to fix it.
///
/// ```
/// use rerun_core::scope::validate_scope;
/// assert!(validate_scope("billing.charge").is_ok());
/// assert!(validate_scope("").is_err());
/// assert!(validate_scope("  ").is_err());
/// assert!(validate_scope("billing\ncharge").is_err());
/// assert!(validate_scope(&"a".repeat(513)).is_err());
/// ```
pub fn validate_scope(scope: &str) -> Result<(), String> {
    // Every call checks its scope, and nearly every scope is printable ASCII: one pass over the
    // bytes settles those. Anything else (empty, all spaces, too long, a control character,
    // non-ASCII) takes the full check, which says what is wrong.
    if scope.len() <= MAX_SCOPE_BYTES && printable_ascii_not_blank(scope.as_bytes()) {
        return Ok(());
    }
    validate_scope_fully(scope)
}

/// Whether `bytes` are all printable ASCII (space to `~`) and not all spaces (nor none).
#[inline]
fn printable_ascii_not_blank(bytes: &[u8]) -> bool {
    let (mut printable, mut blank) = (true, true);
    for &b in bytes {
        printable &= (b' '..=b'~').contains(&b);
        blank &= b == b' ';
    }
    printable && !blank
}

/// [`validate_scope`] without the fast path for printable ASCII.
fn validate_scope_fully(scope: &str) -> Result<(), String> {
    if scope.is_empty() {
        return Err(
            "a scope cannot be empty: it names the operation; write `scope = \"billing.charge\"`"
                .to_owned(),
        );
    }
    if scope.trim().is_empty() {
        return Err(
            "a scope cannot be blank: it names the operation; write `scope = \"billing.charge\"`"
                .to_owned(),
        );
    }
    if scope.len() > MAX_SCOPE_BYTES {
        return Err(format!(
            "a scope is at most {MAX_SCOPE_BYTES} bytes long and this one has {} bytes; name the operation briefly, as in `scope = \"billing.charge\"`",
            scope.len()
        ));
    }
    if let Some((at, c)) = scope.char_indices().find(|(_, c)| c.is_control()) {
        return Err(format!(
            "a scope cannot contain control characters and this one has `{}` at byte {at}; remove it, as in `scope = \"billing.charge\"`",
            c.escape_default()
        ));
    }
    Ok(())
}

/// The default scope of one annotated function, computed on its first call.
///
/// The macro declares `fn __rerun_scope_marker() {}` in a block at the top of the function's
/// body: the compiler's name for that nested function is the function's own path (with its
/// `impl`'s self type and trait), which the attribute cannot see from where it stands. For the
/// macros' use, through `__private`.
#[doc(hidden)]
pub struct DefaultScope {
    /// The function's path.
    path: OnceLock<&'static str>,
    /// Of a method: whether it is a trait's default body (its path names the trait, not the
    /// type), whose scope is then the implementing type's, in `per_type`.
    default_body: OnceLock<bool>,
    /// A default body's scope for each implementing type, by the type's name.
    per_type: RwLock<BTreeMap<&'static str, &'static str>>,
}

impl DefaultScope {
    /// A scope not computed yet (for a `static`).
    #[allow(clippy::new_without_default)]
    pub const fn new() -> DefaultScope {
        DefaultScope {
            path: OnceLock::new(),
            default_body: OnceLock::new(),
            per_type: RwLock::new(BTreeMap::new()),
        }
    }

    /// The scope of the function in which `marker` (the nested `fn __rerun_scope_marker`) is
    /// declared.
    pub fn get<F>(&'static self, marker: F) -> &'static str {
        let _ = marker;
        self.path
            .get_or_init(|| leaked(from_type_name(std::any::type_name::<F>())))
    }

    /// The scope of a method of `S` (one with a `self` receiver) in which `marker` is
    /// declared: as [`get`](Self::get), except in a trait's default body, whose path names the
    /// trait and not the type: there it is the path the method would have in the type's impl,
    /// `<Type as Trait>::method`, so that two types using one default body never share records.
    pub fn get_for<S: ?Sized, F>(&'static self, marker: F) -> &'static str {
        let path = self.get(marker);
        let self_name = std::any::type_name::<S>();
        if !*self
            .default_body
            .get_or_init(|| is_default_body(path, self_name))
        {
            return path;
        }
        let known = self
            .per_type
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .get(self_name)
            .copied();
        if let Some(scope) = known {
            return scope;
        }
        let mut per_type = self
            .per_type
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        // Once per implementing type, for the life of the process.
        per_type
            .entry(self_name)
            .or_insert_with(|| leaked(default_body_scope(path, self_name)))
    }
}

/// `scope` as a `&'static str`, leaked when it was computed.
fn leaked(scope: Cow<'static, str>) -> &'static str {
    match scope {
        Cow::Borrowed(scope) => scope,
        Cow::Owned(scope) => Box::leak(scope.into_boxed_str()),
    }
}

/// Whether `path`, the default scope of a method of the type named `self_name`, is that of a
/// trait's default body: not a trait impl's (`<Type as Trait>::method`), nor an inherent
/// impl's (`Type::method`, the same type as `self_name` once generic arguments and closure
/// segments are set aside: `m::G<_>::f` is a method of `m::G<u8>`).
fn is_default_body(path: &str, self_name: &str) -> bool {
    if path.starts_with('<') {
        return false;
    }
    let segments = split_path(path);
    let Some((_, owner)) = segments.split_last() else {
        return false;
    };
    if owner.is_empty() {
        return false;
    }
    // Joined, then compared: an impl printed `<impl Type>` was read into one segment.
    let of_path = without_generics(&owner.join("::"));
    let of_self: Vec<&str> = split_path(self_name)
        .into_iter()
        .filter(|s| !is_closure(s))
        .collect();
    of_path != without_generics(&of_self.join("::"))
}

/// The scope of a trait's default body (`path`, `crate::Trait::method`) for the type named
/// `self_name`: `<Type as crate::Trait>::method`, cut with a hash as any overlong scope.
fn default_body_scope(path: &str, self_name: &str) -> Cow<'static, str> {
    let segments = split_path(path);
    let (method, owner) = match segments.split_last() {
        Some((method, owner)) => (*method, owner.join("::")),
        None => (path, String::new()),
    };
    let qualified = format!("<{self_name} as {owner}>::{method}");
    bounded(Cow::Owned(qualified))
}

/// A path without its generic arguments: `m::G<alloc::vec::Vec<u8>>` as `m::G`.
fn without_generics(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    let mut depth = 0usize;
    for (at, c) in path.char_indices() {
        match c {
            '<' => depth += 1,
            '>' if path[..at].ends_with('-') => {}
            '>' => depth = depth.saturating_sub(1),
            _ if depth == 0 => out.push(c),
            _ => {}
        }
    }
    out
}

/// The name of the marker function nested in an annotated function.
const MARKER: &str = "__rerun_scope_marker";

/// The scope of the function whose nested marker function has the type name `name`:
/// `mycrate::billing::charge::__rerun_scope_marker` gives `mycrate::billing::charge`.
///
/// - The marker's own segment goes, and so do `{{closure}}` segments (the body of an `async fn`
///   is a closure to the compiler).
/// - An impl printed as `<impl Trait for Type>` or `<impl Type>` after the module path (as
///   older compilers print every impl, and current ones an impl inside a block such as
///   `const _: () = { … }`) gives the same scope as one printed `<Type as Trait>` or `Type`.
/// - A path longer than [`MAX_SCOPE_BYTES`] is cut, and ends with a hash of the whole path.
pub(crate) fn from_type_name(name: &'static str) -> Cow<'static, str> {
    let path = name
        .strip_suffix(MARKER)
        .and_then(|p| p.strip_suffix("::"))
        .unwrap_or(name);
    let segments = split_path(path);
    let plain = segments
        .iter()
        .all(|s| !is_closure(s) && !s.starts_with("<impl "));
    let scope = if plain {
        Cow::Borrowed(path)
    } else {
        let mut kept: Vec<Cow<'_, str>> = Vec::with_capacity(segments.len());
        for segment in segments {
            if is_closure(segment) {
                continue;
            }
            match impl_segment(segment) {
                Some(qualified) => {
                    // The self type is printed with its full path: the module path before it
                    // is not part of the newer format.
                    kept.clear();
                    kept.push(Cow::Owned(qualified));
                }
                None => kept.push(Cow::Borrowed(segment)),
            }
        }
        Cow::Owned(kept.join("::"))
    };
    bounded(scope)
}

/// `scope`, or when longer than [`MAX_SCOPE_BYTES`], its start with a hash of the whole.
fn bounded(scope: Cow<'static, str>) -> Cow<'static, str> {
    if scope.len() <= MAX_SCOPE_BYTES {
        return scope;
    }
    // Deterministic, and still distinct from every other path.
    use sha2::Digest as _;
    let digest = sha2::Sha256::digest(scope.as_bytes());
    let mut hash = String::with_capacity(17);
    hash.push('#');
    for b in &digest[..8] {
        hash.push(char::from(b"0123456789abcdef"[usize::from(b >> 4)]));
        hash.push(char::from(b"0123456789abcdef"[usize::from(b & 15)]));
    }
    let mut cut = MAX_SCOPE_BYTES - hash.len();
    while !scope.is_char_boundary(cut) {
        cut -= 1;
    }
    Cow::Owned(format!("{}{hash}", &scope[..cut]))
}

fn is_closure(segment: &str) -> bool {
    segment == "{{closure}}" || (segment.starts_with("{closure#") && segment.ends_with('}'))
}

/// `<impl Trait for Type>` as `<Type as Trait>`, and `<impl Type>` as `Type`.
fn impl_segment(segment: &str) -> Option<String> {
    let inner = segment.strip_prefix("<impl ")?.strip_suffix('>')?;
    Some(match find_top_level(inner, " for ") {
        Some(at) => format!("<{} as {}>", &inner[at + 5..], &inner[..at]),
        None => inner.to_owned(),
    })
}

/// The `::`-separated segments of a path, not splitting inside `<…>`, `(…)` or `[…]`.
fn split_path(path: &str) -> Vec<&str> {
    let mut segments = Vec::new();
    let mut rest = path;
    while let Some(at) = find_top_level(rest, "::") {
        segments.push(&rest[..at]);
        rest = &rest[at + 2..];
    }
    segments.push(rest);
    segments
}

/// The first occurrence of `needle` in `text` outside brackets.
fn find_top_level(text: &str, needle: &str) -> Option<usize> {
    let mut depth = 0usize;
    for (at, c) in text.char_indices() {
        match c {
            '<' | '(' | '[' => depth += 1,
            // `->` in a fn pointer type is not a bracket.
            '>' if text[..at].ends_with('-') => {}
            '>' | ')' | ']' => depth = depth.saturating_sub(1),
            _ if depth == 0 && text[at..].starts_with(needle) => return Some(at),
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scope(name: &'static str) -> String {
        from_type_name(name).into_owned()
    }

    /// A free function's default scope is what it was before methods got their type: records
    /// written under `module_path!()` and the name stay valid.
    #[test]
    fn free_function_scope_is_module_path_and_name() {
        fn __rerun_scope_marker() {}
        fn marker<F>(_: F) -> &'static str {
            std::any::type_name::<F>()
        }
        // The marker of this test function itself.
        assert_eq!(
            scope(marker(__rerun_scope_marker)),
            concat!(
                module_path!(),
                "::free_function_scope_is_module_path_and_name"
            )
        );
        static SCOPE: DefaultScope = DefaultScope::new();
        let first = SCOPE.get(__rerun_scope_marker);
        assert_eq!(
            first,
            concat!(
                module_path!(),
                "::free_function_scope_is_module_path_and_name"
            )
        );
        // Computed once: the same `&'static str` on every call.
        assert!(std::ptr::eq(first, SCOPE.get(__rerun_scope_marker)));
    }

    #[test]
    fn methods_keep_their_type_and_trait() {
        assert_eq!(
            scope("mycrate::billing::free_fn::__rerun_scope_marker"),
            "mycrate::billing::free_fn"
        );
        assert_eq!(
            scope("mycrate::billing::SendReceipt::inherent::__rerun_scope_marker"),
            "mycrate::billing::SendReceipt::inherent"
        );
        assert_eq!(
            scope("<mycrate::billing::SendReceipt as mycrate::billing::Handler>::handle::__rerun_scope_marker"),
            "<mycrate::billing::SendReceipt as mycrate::billing::Handler>::handle"
        );
        assert_eq!(
            scope("mycrate::billing::G<_>::m::__rerun_scope_marker"),
            "mycrate::billing::G<_>::m"
        );
        assert_eq!(
            scope("<mycrate::G<u8> as mycrate::Gen<alloc::vec::Vec<alloc::string::String>>>::h::__rerun_scope_marker"),
            "<mycrate::G<u8> as mycrate::Gen<alloc::vec::Vec<alloc::string::String>>>::h"
        );
    }

    #[test]
    fn closure_segments_are_dropped() {
        assert_eq!(
            scope("mycrate::billing::async_fn::{{closure}}::__rerun_scope_marker"),
            "mycrate::billing::async_fn"
        );
        assert_eq!(
            scope("<mycrate::S as mycrate::T>::a::{{closure}}::{{closure}}::__rerun_scope_marker"),
            "<mycrate::S as mycrate::T>::a"
        );
        assert_eq!(scope("m::f::{closure#0}::__rerun_scope_marker"), "m::f");
    }

    #[test]
    fn impl_paths_read_as_qualified_paths() {
        assert_eq!(
            scope("mycrate::billing::<impl mycrate::billing::Handler for mycrate::billing::SendReceipt>::handle::__rerun_scope_marker"),
            "<mycrate::billing::SendReceipt as mycrate::billing::Handler>::handle"
        );
        assert_eq!(
            scope("mycrate::billing::<impl mycrate::billing::SendReceipt>::inherent::{{closure}}::__rerun_scope_marker"),
            "mycrate::billing::SendReceipt::inherent"
        );
        // An impl inside `const _: () = { … }`, as current compilers print it.
        assert_eq!(
            scope("mycrate::m::_::<impl mycrate::m::Tr for mycrate::m::G<_>>::meth::__rerun_scope_marker"),
            "<mycrate::m::G<_> as mycrate::m::Tr>::meth"
        );
        assert_eq!(
            scope("m::<impl m::Tr<fn(u8) -> u8> for m::G<_>>::f::__rerun_scope_marker"),
            "<m::G<_> as m::Tr<fn(u8) -> u8>>::f"
        );
    }

    /// A trait's default body is scoped by the implementing type, as the method of that type's
    /// impl would be; inherent and trait impls keep their paths whatever `Self` is.
    #[test]
    fn default_bodies_are_scoped_by_the_implementing_type() {
        let cases = [
            ("t::m::Handler::handle", "t::m::Bar", true),
            ("t::m::Handler::handle", "dyn t::m::Handler", true),
            ("t::m::Handler::handle", "[u8]", true),
            ("t::m::Handler::handle", "(u8, u16)", true),
            ("t::m::Handler::handle", "&t::m::Bar", true),
            ("t::m::Handler::handle", "t::m::Handler2", true),
            ("t::m::Foo<_>::m", "t::m::Foo<u32>", false),
            ("t::m::Bar::m", "t::m::Bar", false),
            ("t::m::Foo<u8>::n", "t::m::Foo<u8>", false),
            (
                "u::a::Foo<alloc::vec::Vec<_>>::m",
                "u::a::Foo<alloc::vec::Vec<u32>>",
                false,
            ),
            ("<dyn u::b::D>::m", "dyn u::b::D", false),
            ("<t::Bar as t::Handler>::handle", "t::Bar", false),
            ("t::main::S::m", "t::main::{{closure}}::S", false),
            ("f", "t::Bar", false),
        ];
        for (path, self_name, expected) in cases {
            assert_eq!(
                is_default_body(path, self_name),
                expected,
                "{path} of {self_name}"
            );
        }
        assert_eq!(
            default_body_scope("t::m::Handler::handle", "t::m::Bar"),
            "<t::m::Bar as t::m::Handler>::handle"
        );
        // What the compiler prints, end to end: two implementors, two scopes; an inherent
        // method and an overriding impl keep theirs.
        trait Handler {
            fn scope(&self) -> &'static str {
                fn __rerun_scope_marker() {}
                static SCOPE: DefaultScope = DefaultScope::new();
                SCOPE.get_for::<Self, _>(__rerun_scope_marker)
            }
        }
        struct A;
        struct B<T>(T);
        impl Handler for A {}
        impl<T> Handler for B<T> {}
        impl<T> B<T> {
            fn inherent(&self) -> &'static str {
                fn __rerun_scope_marker() {}
                static SCOPE: DefaultScope = DefaultScope::new();
                SCOPE.get_for::<Self, _>(__rerun_scope_marker)
            }
        }
        let here = module_path!();
        let trait_path =
            format!("{here}::default_bodies_are_scoped_by_the_implementing_type::Handler");
        assert_eq!(A.scope(), format!("<{here}::default_bodies_are_scoped_by_the_implementing_type::A as {trait_path}>::scope"));
        let b = B(1u8).scope();
        assert!(
            b.starts_with(&format!(
                "<{here}::default_bodies_are_scoped_by_the_implementing_type::B<u8> as "
            )),
            "{b}"
        );
        assert_ne!(
            B("x").scope(),
            b,
            "each instance of a generic type is its own implementor"
        );
        assert!(std::ptr::eq(A.scope(), A.scope()), "computed once per type");
        let inherent = B(1u8).inherent();
        assert!(inherent.ends_with("::B<_>::inherent"), "{inherent}");
        assert_eq!(B("x").inherent(), inherent);
    }

    #[test]
    fn unexpected_names_are_kept() {
        assert_eq!(scope("no_marker::f"), "no_marker::f");
        assert_eq!(scope("__rerun_scope_marker"), "__rerun_scope_marker");
    }

    #[test]
    fn overlong_paths_are_cut_with_a_hash() {
        let long: &'static str =
            Box::leak(format!("m::{}::f::__rerun_scope_marker", "T".repeat(600)).into_boxed_str());
        let other: &'static str =
            Box::leak(format!("m::{}::g::__rerun_scope_marker", "T".repeat(600)).into_boxed_str());
        let (a, b) = (scope(long), scope(other));
        assert_eq!(a.len(), MAX_SCOPE_BYTES);
        assert!(validate_scope(&a).is_ok());
        assert_ne!(a, b);
        assert_eq!(a, scope(long));
    }

    #[test]
    fn validation() {
        assert_eq!(validate_scope("billing.charge"), Ok(()));
        assert_eq!(validate_scope("<a::B as a::C>::d"), Ok(()));
        assert_eq!(validate_scope(&"é".repeat(256)), Ok(()));
        assert_eq!(validate_scope("é"), Ok(()));
        let empty = validate_scope("").unwrap_err();
        assert!(empty.contains("cannot be empty"), "{empty}");
        let long = validate_scope(&"a".repeat(513)).unwrap_err();
        assert!(
            long.contains("at most 512 bytes") && long.contains("513"),
            "{long}"
        );
        let control = validate_scope("billing\tcharge").unwrap_err();
        assert!(control.contains("`\\t` at byte 7"), "{control}");
        assert!(validate_scope("a\0").is_err());
        assert!(validate_scope("a\u{85}").is_err());
        assert!(validate_scope("a\u{7f}").is_err());
        assert!(validate_scope(" ").is_err());
        assert!(validate_scope(" a ").is_ok());
    }

    mod fast_path {
        use super::super::{validate_scope, validate_scope_fully};
        use proptest::prelude::*;

        fn scopes() -> impl Strategy<Value = String> {
            prop_oneof![
                "[ -~]{0,520}",
                "[ \\t\\n\\x7f]{0,4}[ -~]{0,8}[ \\t\\x00\\x1f\\x7f]{0,2}",
                ".{0,40}",
                proptest::collection::vec(any::<u8>(), 0..600)
                    .prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
            ]
        }

        proptest! {
            /// The fast path for printable ASCII accepts exactly what the full rule accepts.
            #[test]
            fn agrees_with_the_full_rule(scope in scopes()) {
                prop_assert_eq!(validate_scope(&scope), validate_scope_fully(&scope));
            }
        }
    }
}
