//! The `#[resilient]` attribute. Depend on the `resilient` crate, which
//! re-exports it and documents it; this crate is its implementation.
//!
//! Three steps, three modules: `attr` parses the arguments, `valid` refuses
//! what cannot work, `expand` writes the wrapped function.

extern crate proc_macro;

mod attr;
mod expand;
mod func;
mod name;
mod valid;

use proc_macro::TokenStream;

/// See `resilient::resilient`.
///
/// The generated code reaches the runtime through one import of the crate,
/// `::resilient` unless `crate = "…"` says otherwise. With the dependency
/// renamed in Cargo.toml (`res = { package = "resilient", … }`) and no
/// `crate`, that import is the one error, at the attribute:
/// "unresolved import `resilient`: no external crate `resilient`".
///
/// ```compile_fail,E0432
/// #[res::resilient(retries = 1, idempotent)]
/// async fn fetch() -> Result<(), std::io::Error> {
///     Ok(())
/// }
/// ```
///
/// The fix is `crate = "res"`:
///
/// ```
/// #[res::resilient(crate = "res", retries = 1, idempotent)]
/// async fn fetch() -> Result<(), std::io::Error> {
///     Ok(())
/// }
/// ```
#[proc_macro_attribute]
pub fn resilient(args: TokenStream, item: TokenStream) -> TokenStream {
    let item = proc_macro2::TokenStream::from(item);
    match run(args.into(), item.clone()) {
        Ok(expanded) => expanded.into(),
        // Emit the user's function as written next to the error, so a
        // mistake in the attribute gives one error, not a cascade of
        // "cannot find function" errors at every call site.
        Err(e) => {
            let mut out = item;
            out.extend(e.to_compile_error());
            out.into()
        }
    }
}

fn run(
    args: proc_macro2::TokenStream,
    item: proc_macro2::TokenStream,
) -> syn::Result<proc_macro2::TokenStream> {
    let args = syn::parse2::<attr::Args>(args);
    let func = syn::parse2::<func::Func>(item);
    let (args, func) = match (args, func) {
        (Ok(a), Ok(f)) => (a, f),
        (Err(mut a), Err(f)) => {
            a.combine(f);
            return Err(a);
        }
        (Err(e), _) | (_, Err(e)) => return Err(e),
    };
    let checked = valid::validate(&args, &func)?;
    Ok(expand::expand(&args, func, &checked))
}
