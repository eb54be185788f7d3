//! Exports hotpin's entry points in the dynamic symbol table, so `tracer` finds them (by
//! their marker symbol) even when this binary is stripped.
fn main() {
    println!("cargo:rustc-link-arg-bins=-Wl,--export-dynamic-symbol=hotpin_*");
}
