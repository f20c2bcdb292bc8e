//! Generating the wrapped function. See the `resilient` crate docs for what
//! the expansion looks like and why.

use proc_macro2::{Delimiter, Group, Span, TokenStream, TokenTree};
use quote::{ToTokens, format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{FnArg, Pat, PatIdent, Path, ReturnType, parse_quote};

use crate::attr::Args;
use crate::func::Func;
use crate::valid::Checked;

/// `tokens` with every span set to `span`: the crate path placed in a
/// check spanned at the user's code, so the whole check, path included,
/// points there and not at the attribute.
fn respan(tokens: &impl ToTokens, span: Span) -> TokenStream {
    tokens
        .to_token_stream()
        .into_iter()
        .map(|mut tt| {
            if let TokenTree::Group(g) = &tt {
                let mut group = Group::new(g.delimiter(), respan(&g.stream(), span));
                group.set_span(span);
                tt = TokenTree::Group(group);
            } else {
                tt.set_span(span);
            }
            tt
        })
        .collect()
}

/// `ident`, reported at `location` but resolved with its own hygiene.
fn at(ident: &syn::Ident, location: Span) -> syn::Ident {
    let mut moved = ident.clone();
    moved.set_span(ident.span().located_at(location));
    moved
}

pub(crate) fn expand(args: &Args, func: Func, checked: &Checked) -> TokenStream {
    let krate: Path = args
        .krate
        .as_ref()
        .map_or_else(|| parse_quote!(::resilient), |k| k.value.clone());
    let Func {
        attrs,
        vis,
        sig,
        body,
    } = func;
    let ReturnType::Type(_, ret) = &sig.output else {
        unreachable!("validated: the function returns a `Result`");
    };

    let mut outer_sig = sig.clone();
    let mut checks = Vec::new();
    let mut rebinds = Vec::new();
    // Pattern arguments, destructured inside each attempt's future.
    let mut destructures = Vec::new();
    // The arguments as the outer function binds them, to pass to a fallback.
    let mut call_args = Vec::new();
    if checked.reuses_arguments {
        for (i, arg) in outer_sig.inputs.iter_mut().enumerate() {
            let typed = match arg {
                FnArg::Receiver(r) => {
                    call_args.push(r.self_token.to_token_stream());
                    continue;
                }
                FnArg::Typed(typed) => typed,
            };
            let ty_span = typed.ty.span();
            let krate_at_ty = respan(&krate, ty_span);
            // The name the outer function binds this argument to.
            let name = match &mut *typed.pat {
                Pat::Ident(PatIdent {
                    by_ref: None,
                    subpat: None,
                    ident,
                    mutability,
                    ..
                }) => {
                    // `mut` moves to each attempt's own copy, where the body
                    // mutates it; the outer binding is never mutated.
                    let mutability = mutability.take();
                    // The copy is made by a call located at the argument's
                    // type, so a non-`Clone` argument is reported there,
                    // once; the name keeps its own hygiene, so parameters
                    // named by a `macro_rules!` caller still resolve.
                    let source = at(ident, ty_span);
                    rebinds.push(quote_spanned! {ty_span=>
                        let #mutability #ident = #krate_at_ty::__private::ReusableArgument::reuse(&#source);
                    });
                    ident.clone()
                }
                pat => {
                    let name = format_ident!("__resilient_arg_{}", i, span = Span::mixed_site());
                    let original = std::mem::replace(
                        pat,
                        Pat::Ident(PatIdent {
                            attrs: Vec::new(),
                            by_ref: None,
                            mutability: None,
                            ident: name.clone(),
                            subpat: None,
                        }),
                    );
                    // `_` binds nothing: there is nothing to copy.
                    if !matches!(original, Pat::Wild(_)) {
                        // Copy in the closure, destructure inside the
                        // attempt's future, so that `ref` bindings borrow
                        // from the future's own copy.
                        let copy =
                            format_ident!("__resilient_copy_{}", i, span = Span::mixed_site());
                        rebinds.push(quote_spanned! {ty_span=>
                            let #copy = #krate_at_ty::__private::ReusableArgument::reuse(&#name);
                        });
                        destructures.push(quote! { let #original = #copy; });
                    }
                    name
                }
            };
            call_args.push(name.to_token_stream());
            if checked.key_params.contains(&i) {
                let source = at(&name, ty_span);
                checks.push(quote_spanned! {ty_span=>
                    #krate_at_ty::__private::idempotency_key(&#source);
                });
            }
        }
    }
    // The engine's bounds (a `Result` whose error converts from
    // `resilient::Error` and, when looked at, implements `Classify`) are
    // checked at the engine call, spanned at the return type.
    let ret_span = ret.span();
    let krate_at_ret = respan(&krate, ret_span);
    // Name the return type for the engine when it can be named, so its
    // errors speak of `u32`, not of what the body happened to return.
    let ret_hint = if ret.to_token_stream().to_string().contains("impl") {
        quote!(_)
    } else {
        ret.to_token_stream()
    };

    let retries = args.retries.as_ref().map_or(0, |r| r.value);
    let classifier = match &args.classify {
        Some(path) => path.value.to_token_stream(),
        None if retries > 0 || args.breaker.is_some() || args.budget.is_some() => {
            quote_spanned!(ret_span=> #krate_at_ret::__private::classify_by_trait)
        }
        None => quote!(#krate::__private::unclassified),
    };

    let name = sig.ident.to_string();
    let mut policy = quote! {
        #krate::__private::Policy::new(::core::concat!(::core::module_path!(), "::", #name))
    };
    if retries > 0 {
        policy.extend(quote!(.retries(#retries)));
        let strategy = format_ident!(
            "{}",
            args.backoff.as_ref().map_or("full_jitter", |b| b.value)
        );
        let base = args.base_ms.as_ref().map_or(100, |b| b.value);
        let cap = args.cap_ms.as_ref().map_or(30_000, |c| c.value);
        policy.extend(quote! {
            .backoff(#krate::__private::Backoff::#strategy(
                ::core::time::Duration::from_millis(#base),
                ::core::time::Duration::from_millis(#cap),
            ))
        });
    }
    if let Some(d) = &args.deadline_ms {
        let ms = d.value;
        policy.extend(quote!(.deadline_ms(#ms)));
    }
    if let Some(t) = &args.timeout_ms {
        let ms = t.value;
        policy.extend(quote!(.timeout_ms(#ms)));
    }
    if args.fallback.is_some() {
        policy.extend(quote!(.fallback()));
    }
    for (method, name) in [
        ("breaker", &args.breaker),
        ("budget", &args.budget),
        ("bulkhead", &args.bulkhead),
    ] {
        if let Some(name) = name {
            let method = format_ident!("{}", method);
            let lit = &name.value;
            policy.extend(quote!(.#method(#lit)));
        }
    }

    let policy_ident = format_ident!("__RESILIENT_POLICY", span = Span::mixed_site());
    let call = if checked.reuses_arguments {
        let engine = quote_spanned! {ret_span=>
            #krate_at_ret::__private::retry::<#ret_hint, _, _, _, _>(&#policy_ident, #classifier, #krate_at_ret::__private::refusal_into::<#ret_hint>(), || {
                #(#rebinds)*
                async move { #(#destructures)* #body }
            })
        };
        match &args.fallback {
            None => engine,
            Some(fallback) => {
                let path = &fallback.value;
                let value = format_ident!("__resilient_value", span = Span::mixed_site());
                let error = format_ident!("__resilient_error", span = Span::mixed_site());
                // The engine borrowed the arguments; they are free again for
                // the fallback, which is awaited by the outer `.await` below.
                let fallback_span = fallback
                    .tokens
                    .clone()
                    .into_iter()
                    .next()
                    .map_or(ret_span, |t| t.span());
                let krate_at_fallback = respan(&krate, fallback_span);
                let call_fallback = quote_spanned! {fallback_span=>
                    #krate_at_fallback::__private::fallback::<#ret_hint, _>(#path(#(#call_args,)* #error)).await
                };
                let mark = format_ident!("__resilient_mark", span = Span::mixed_site());
                quote_spanned! {ret_span=>
                    async {
                        let #mark = #krate::__private::give_up_mark();
                        match #engine.await {
                            ::core::result::Result::Ok(#value) => ::core::result::Result::Ok(#value),
                            ::core::result::Result::Err(#error) => {
                                #krate::__private::fallback_served(&#policy_ident, #mark);
                                #call_fallback
                            }
                        }
                    }
                }
            }
        }
    } else {
        quote_spanned! {ret_span=>
            #krate_at_ret::__private::once::<#ret_hint, _, _, _, _>(&#policy_ident, #classifier, #krate_at_ret::__private::refusal_into::<#ret_hint>(), move || async move #body)
        }
    };

    // `.await` spanned at the return type too: the engine's bounds are
    // checked again where its future is awaited, and must land there.
    let awaited = quote_spanned!(ret_span=> #call.await);
    let mut outer_body = Group::new(
        Delimiter::Brace,
        quote! {
            #(#checks)*
            static #policy_ident: #krate::__private::Policy = #policy;
            #awaited
        },
    );
    outer_body.set_span(body.span());
    quote! {
        #(#attrs)*
        #vis #outer_sig #outer_body
    }
}
