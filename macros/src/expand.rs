//! Generating the wrapped function. See the `resilient` crate docs for what
//! the expansion looks like and why.

use proc_macro2::{Delimiter, Group, Span, TokenStream};
use quote::{ToTokens, format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{FnArg, Pat, PatIdent, Path, ReturnType, parse_quote};

use crate::attr::Args;
use crate::func::Func;
use crate::valid::Checked;

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
                    rebinds.push(quote! {
                        let #mutability #ident = ::core::clone::Clone::clone(&#ident);
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
                    rebinds.push(quote! {
                        let #original = ::core::clone::Clone::clone(&#name);
                    });
                    name
                }
            };
            call_args.push(name.to_token_stream());
            // Checks are spanned at the argument's type, so a refusal lands there.
            let at_ty = syn::Ident::new(&name.to_string(), ty_span).into_token_stream();
            let at_ty = if name.to_string().starts_with("__resilient_arg_") {
                name.to_token_stream()
            } else {
                at_ty
            };
            checks.push(quote_spanned! {ty_span=>
                #krate::__private::reusable_argument(&#at_ty);
            });
            if checked.key_params.contains(&i) {
                checks.push(quote_spanned! {ty_span=>
                    #krate::__private::idempotency_key(&#at_ty);
                });
            }
        }
    }
    // `impl Trait` cannot be named in a turbofish; the engine's own bounds
    // still check such a return type, with a less pointed message.
    if !ret.to_token_stream().to_string().contains("impl") {
        checks.push(quote_spanned! {ret.span()=>
            #krate::__private::returns_result::<#ret>();
        });
    }

    let retries = args.retries.as_ref().map_or(0, |r| r.value);
    let classifier = match &args.classify {
        Some(path) => path.value.to_token_stream(),
        None if retries > 0 || args.breaker.is_some() || args.budget.is_some() => {
            quote_spanned!(ret.span()=> #krate::__private::classify_by_trait)
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
        let engine = quote! {
            #krate::__private::retry(&#policy_ident, #classifier, || {
                #(#rebinds)*
                async move #body
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
                quote! {
                    async {
                        match #engine.await {
                            ::core::result::Result::Ok(#value) => ::core::result::Result::Ok(#value),
                            ::core::result::Result::Err(#error) => {
                                #krate::__private::fallback_served(&#policy_ident);
                                #path(#(#call_args,)* #error).await
                            }
                        }
                    }
                }
            }
        }
    } else {
        quote! {
            #krate::__private::once(&#policy_ident, #classifier, async move #body)
        }
    };

    let mut outer_body = Group::new(
        Delimiter::Brace,
        quote! {
            #(#checks)*
            static #policy_ident: #krate::__private::Policy = #policy;
            #call.await
        },
    );
    outer_body.set_span(body.span());
    quote! {
        #(#attrs)*
        #vis #outer_sig #outer_body
    }
}
