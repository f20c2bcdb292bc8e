//! The annotated item, parsed just enough to wrap it.
//!
//! The body is kept as the raw brace group, unparsed: a body that does not
//! parse yet (mid-edit in an IDE) still expands, and its tokens keep their
//! spans, so rustc's own diagnostics keep pointing into the user's code.

use proc_macro2::{Delimiter, Group};
use syn::parse::{Parse, ParseStream};
use syn::{Attribute, Signature, Visibility};

pub(crate) struct Func {
    pub(crate) attrs: Vec<Attribute>,
    pub(crate) vis: Visibility,
    pub(crate) sig: Signature,
    pub(crate) body: Group,
}

impl Parse for Func {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let attrs = input.call(Attribute::parse_outer)?;
        let vis: Visibility = input.parse()?;
        // What a signature may begin with; anything else (`struct`,
        // `impl`, `mod`, …) is no function.
        let starts_fn = input.peek(syn::Token![fn])
            || input.peek(syn::Token![async])
            || input.peek(syn::Token![const])
            || input.peek(syn::Token![unsafe])
            || input.peek(syn::Token![extern]);
        if !starts_fn {
            return Err(input.error(
                "`#[resilient]` goes on a function (`async fn`, or a `fn` returning a future), the one that calls the dependency; it wraps each call of it",
            ));
        }
        let sig: Signature = input.parse()?;
        if input.peek(syn::Token![;]) {
            return Err(syn::Error::new(
                sig.ident.span(),
                "`#[resilient]` needs the function's body; put it on the implementation, not on a declaration",
            ));
        }
        let body: Group = input.parse()?;
        if body.delimiter() != Delimiter::Brace {
            return Err(syn::Error::new(
                body.span(),
                "expected the function's body in braces",
            ));
        }
        Ok(Func {
            attrs,
            vis,
            sig,
            body,
        })
    }
}

/// `true` when `tokens` contain the identifier (or keyword) `word` as a
/// whole token, at any depth: `impl` in `Result<impl Display, E>`, but not
/// in `SimpleError`.
pub(crate) fn mentions(tokens: &proc_macro2::TokenStream, word: &str) -> bool {
    tokens.clone().into_iter().any(|tt| match tt {
        proc_macro2::TokenTree::Ident(ident) => ident == word,
        proc_macro2::TokenTree::Group(group) => mentions(&group.stream(), word),
        _ => false,
    })
}
