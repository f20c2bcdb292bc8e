//! Parsing `#[resilient(...)]`'s arguments. Only syntax here: what each key
//! may hold. Rules across keys and the function live in `valid.rs`.

use proc_macro2::{Span, TokenStream, TokenTree};
use quote::ToTokens;
use syn::ext::IdentExt;
use syn::parse::{Parse, ParseStream};
use syn::{Ident, LitInt, LitStr, Path, Token};

pub(crate) const KEYS: &str = "`retries`, `idempotent`, `deadline_ms`, `timeout_ms`, `backoff`, `base_ms`, `cap_ms`, `breaker`, `budget`, `bulkhead`, `fallback`, `classify`, `crate`";

pub(crate) const STRATEGIES: [&str; 4] = [
    "full_jitter",
    "equal_jitter",
    "decorrelated_jitter",
    "exponential",
];

/// A value and the tokens of the `key = value` it came from, so an error
/// about it underlines the whole of it.
#[derive(Clone)]
pub(crate) struct Spanned2<T> {
    pub(crate) value: T,
    pub(crate) tokens: TokenStream,
}

#[derive(Default)]
pub(crate) struct Args {
    pub(crate) retries: Option<Spanned2<u32>>,
    pub(crate) idempotent: Option<Span>,
    pub(crate) deadline_ms: Option<Spanned2<u64>>,
    pub(crate) timeout_ms: Option<Spanned2<u64>>,
    pub(crate) backoff: Option<Spanned2<&'static str>>,
    pub(crate) base_ms: Option<Spanned2<u64>>,
    pub(crate) cap_ms: Option<Spanned2<u64>>,
    pub(crate) breaker: Option<Spanned2<LitStr>>,
    pub(crate) budget: Option<Spanned2<LitStr>>,
    pub(crate) bulkhead: Option<Spanned2<LitStr>>,
    pub(crate) fallback: Option<Spanned2<Path>>,
    pub(crate) classify: Option<Spanned2<Path>>,
    pub(crate) krate: Option<Spanned2<Path>>,
}

/// Collects errors so the user sees all of them at once.
#[derive(Default)]
pub(crate) struct Errors(Option<syn::Error>);

impl Errors {
    pub(crate) fn push(&mut self, span: Span, message: impl std::fmt::Display) {
        self.push_error(syn::Error::new(span, message));
    }

    /// An error underlining all of `tokens`.
    pub(crate) fn push_spanned(&mut self, tokens: impl ToTokens, message: impl std::fmt::Display) {
        self.push_error(syn::Error::new_spanned(tokens, message));
    }

    pub(crate) fn push_error(&mut self, e: syn::Error) {
        match &mut self.0 {
            Some(all) => all.combine(e),
            None => self.0 = Some(e),
        }
    }

    pub(crate) fn finish(self) -> syn::Result<()> {
        self.0.map_or(Ok(()), Err)
    }
}

impl Parse for Args {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let mut args = Args::default();
        let mut errors = Errors::default();
        while !input.is_empty() {
            match Ident::parse_any(input) {
                Ok(key) => {
                    let name = key.to_string();
                    if let Err(e) = args.parse_value(&key, &name, input) {
                        errors.push_error(e);
                    }
                }
                Err(e) => errors.push_error(e),
            }
            // Whatever went wrong with this argument, resume at the next
            // one, so every mistake is reported at once.
            if !input.is_empty() && !input.peek(Token![,]) {
                let mut rest = TokenStream::new();
                while !input.is_empty() && !input.peek(Token![,]) {
                    rest.extend([input.parse::<TokenTree>()?]);
                }
                if errors.0.is_none() {
                    errors.push_spanned(rest, "expected `,` between `#[resilient]` arguments");
                }
            }
            if !input.is_empty() {
                input.parse::<Token![,]>()?;
            }
        }
        errors.finish()?;
        Ok(args)
    }
}

fn set<T>(
    slot: &mut Option<Spanned2<T>>,
    key: &Ident,
    value: T,
    tokens: TokenStream,
) -> syn::Result<()> {
    if slot.is_some() {
        return Err(syn::Error::new(
            key.span(),
            format!("`{key}` is set more than once; keep one"),
        ));
    }
    *slot = Some(Spanned2 { value, tokens });
    Ok(())
}

/// The accepted key a misspelt one, or one another library uses for the
/// same thing, was probably meant to be.
fn closest(name: &str) -> Option<&'static str> {
    // Other libraries' names for the number of attempts or retries.
    if matches!(
        name,
        "max_retries" | "max_attempts" | "attempts" | "retry_count" | "num_retries" | "times"
    ) {
        return Some("retries");
    }
    [
        "retries",
        "idempotent",
        "deadline_ms",
        "timeout_ms",
        "backoff",
        "base_ms",
        "cap_ms",
        "breaker",
        "budget",
        "bulkhead",
        "fallback",
        "classify",
        "crate",
    ]
    .into_iter()
    .map(|k| (strsim::levenshtein(name, k), k))
    .filter(|(d, k)| *d <= 3 || k.starts_with(name) || name.starts_with(k))
    .min()
    .map(|(_, k)| k)
}

fn int<T: std::str::FromStr>(lit: &LitInt, key: &str) -> syn::Result<T>
where
    T::Err: std::fmt::Display,
{
    // A suffix is part of the literal but not of its value: `5s` would
    // silently mean 5 (milliseconds, for the durations).
    let suffix = lit.suffix();
    if !suffix.is_empty() {
        let digits = lit.base10_digits();
        if !key.ends_with("_ms") {
            return Err(syn::Error::new(
                lit.span(),
                format!("`{key}` takes a whole number without a suffix: write `{key} = {digits}`"),
            ));
        }
        // A unit written as a suffix: say what it is in milliseconds.
        let per_unit: Option<u128> = match suffix {
            "ms" => Some(1),
            "s" | "sec" | "secs" => Some(1_000),
            "m" | "min" | "mins" => Some(60_000),
            "h" => Some(3_600_000),
            _ => None,
        };
        let example = per_unit
            .zip(digits.parse::<u128>().ok())
            .and_then(|(per, n)| per.checked_mul(n))
            .map_or(String::new(), |ms| {
                format!(": `{digits}{suffix}` is `{key} = {ms}`")
            });
        return Err(syn::Error::new(
            lit.span(),
            format!(
                "`{key}` takes a whole number of milliseconds, without a unit or suffix{example}"
            ),
        ));
    }
    if lit.base10_digits().starts_with('-') {
        return Err(syn::Error::new(
            lit.span(),
            format!("`{key}` cannot be negative: it takes a whole number from 0 up"),
        ));
    }
    lit.base10_parse::<T>()
        .map_err(|e| syn::Error::new(lit.span(), format!("`{key}` takes a whole number: {e}")))
}

impl Args {
    fn parse_value(&mut self, key: &Ident, name: &str, input: ParseStream<'_>) -> syn::Result<()> {
        // Flags first: they take no value.
        if name == "idempotent" {
            if input.peek(Token![=]) {
                return Err(syn::Error::new(
                    key.span(),
                    "`idempotent` is a flag and takes no value: write `idempotent`",
                ));
            }
            if self.idempotent.is_some() {
                return Err(syn::Error::new(
                    key.span(),
                    "`idempotent` is set more than once; keep one",
                ));
            }
            self.idempotent = Some(key.span());
            return Ok(());
        }
        let expects = match name {
            "retries" | "deadline_ms" | "timeout_ms" | "base_ms" | "cap_ms" => "a whole number",
            "backoff" => {
                "a string: \"full_jitter\", \"equal_jitter\", \"decorrelated_jitter\" or \"exponential\""
            }
            "breaker" | "budget" | "bulkhead" => "a name as a string, like `\"payments\"`",
            "fallback" | "classify" => "a path to a function",
            "crate" => "a path as a string, like `\"::resilient\"`",
            _ => {
                let hint = closest(name).map_or(String::new(), |k| {
                    let note = if k == "retries" && name.contains("attempt") {
                        ", the attempts after the first"
                    } else {
                        ""
                    };
                    format!(" (did you mean `{k}`{note}?)")
                });
                return Err(syn::Error::new(
                    key.span(),
                    format!(
                        "unknown `#[resilient]` argument `{name}`{hint}; expected one of: {KEYS}"
                    ),
                ));
            }
        };
        if !input.peek(Token![=]) {
            return Err(syn::Error::new(
                key.span(),
                format!("`{name}` needs a value: `{name} = ...` with {expects}"),
            ));
        }
        input.parse::<Token![=]>()?;
        let wrong = |span: Span| syn::Error::new(span, format!("`{name}` takes {expects}"));
        match name {
            "retries" | "deadline_ms" | "timeout_ms" | "base_ms" | "cap_ms" => {
                // A constant or an expression: the attribute reads its
                // arguments as the function compiles, before any value is
                // known.
                if !input.peek(syn::Lit) && !input.peek(Token![-]) {
                    if let Ok(expr) = input.fork().parse::<syn::Expr>() {
                        let example = match name {
                            "retries" => "3",
                            "base_ms" => "100",
                            _ => "1000",
                        };
                        return Err(syn::Error::new_spanned(
                            &expr,
                            format!(
                                "`{name}` takes a whole number written out, like `{name} = {example}`: the attribute reads its arguments as the function compiles, so it cannot use the value of `{}`; write the number itself",
                                expr.to_token_stream()
                            ),
                        ));
                    }
                }
                let lit: LitInt = input.parse().map_err(|e| wrong(e.span()))?;
                let tokens = quote::quote!(#key = #lit);
                match name {
                    "retries" => set(&mut self.retries, key, int::<u32>(&lit, name)?, tokens),
                    "deadline_ms" => set(&mut self.deadline_ms, key, int(&lit, name)?, tokens),
                    "timeout_ms" => set(&mut self.timeout_ms, key, int(&lit, name)?, tokens),
                    "base_ms" => set(&mut self.base_ms, key, int(&lit, name)?, tokens),
                    _ => set(&mut self.cap_ms, key, int(&lit, name)?, tokens),
                }
            }
            "backoff" => {
                let lit: LitStr = input.parse().map_err(|e| wrong(e.span()))?;
                let text = lit.value();
                let Some(strategy) = STRATEGIES.into_iter().find(|s| *s == text) else {
                    return Err(syn::Error::new(
                        lit.span(),
                        format!(
                            "unknown backoff `{text}`; expected one of: \"full_jitter\" (the default), \"equal_jitter\", \"decorrelated_jitter\", \"exponential\""
                        ),
                    ));
                };
                set(&mut self.backoff, key, strategy, quote::quote!(#key = #lit))
            }
            "breaker" | "budget" | "bulkhead" => {
                let lit: LitStr = input.parse().map_err(|e| wrong(e.span()))?;
                let text = lit.value();
                if !crate::name::is_valid_name(&text) {
                    return Err(syn::Error::new(
                        lit.span(),
                        format!(
                            "`{name}` names must be non-empty and use only ASCII letters, digits, `_`, `-` and `.`, as in a config file key"
                        ),
                    ));
                }
                let tokens = quote::quote!(#key = #lit);
                match name {
                    "breaker" => set(&mut self.breaker, key, lit, tokens),
                    "budget" => set(&mut self.budget, key, lit, tokens),
                    _ => set(&mut self.bulkhead, key, lit, tokens),
                }
            }
            "fallback" | "classify" => {
                // Quoted, as the names of parts are: the path itself.
                if input.peek(LitStr) {
                    let lit: LitStr = input.parse()?;
                    let text = lit.value();
                    let example = if lit.parse::<Path>().is_ok() {
                        format!(": write `{name} = {text}`")
                    } else {
                        String::new()
                    };
                    return Err(syn::Error::new(
                        lit.span(),
                        format!(
                            "`{name}` takes a path to a function, without quotes{example} (only `breaker`, `budget`, `bulkhead`, `backoff` and `crate` take strings)"
                        ),
                    ));
                }
                let path: Path = input.parse().map_err(|e| wrong(e.span()))?;
                let tokens = path.to_token_stream();
                if name == "fallback" {
                    set(&mut self.fallback, key, path, tokens)
                } else {
                    set(&mut self.classify, key, path, tokens)
                }
            }
            _ => {
                let lit: LitStr = input.parse().map_err(|e| wrong(e.span()))?;
                let path: Path = lit.parse().map_err(|_| {
                    syn::Error::new(
                        lit.span(),
                        "`crate` takes a path as a string, like `\"::resilient\"`",
                    )
                })?;
                set(&mut self.krate, key, path, quote::quote!(#key = #lit))
            }
        }
    }
}
