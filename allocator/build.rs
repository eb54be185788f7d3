//! Compiles the C entry points: only C can name its caller's return address
//! (`__builtin_return_address`), which is the call site of a C ABI allocation.
fn main() {
    println!("cargo:rerun-if-changed=c/entry.c");
    cc::Build::new()
        .file("c/entry.c")
        .flag("-fno-omit-frame-pointer")
        .compile("hotpin_entry");
}
