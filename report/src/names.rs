//! Names a person can read: call sites module first (`libc10.so+0x3c1f0 c10::alloc_cpu`),
//! C++ and Rust symbols demangled (cpp_demangle, rustc-demangle), templates and argument lists
//! folded unless the whole name is asked for, and long names shortened in the middle, never
//! in the module's file name.

/// `symbol` demangled (Rust's legacy and v0 schemes, then C++'s Itanium ABI), or as it is
/// when it is neither (a C name).
pub fn demangle(symbol: &str) -> String {
    if let Ok(rust) = rustc_demangle::try_demangle(symbol) {
        // `{:#}`: without the hash suffix.
        return format!("{rust:#}");
    }
    if symbol.starts_with("_Z")
        && let Ok(cpp) = cpp_demangle::Symbol::new(symbol)
        && let Ok(text) = cpp.demangle()
    {
        return text;
    }
    symbol.to_owned()
}

/// `name` with what is inside its template brackets and argument lists folded: `f<…>(…)`.
/// `operator<`, `operator()` and the like keep their own brackets.
pub fn fold(name: &str) -> String {
    // A Python frame (`train.py:57 in <module>`, `f.<locals>.g`): its brackets are its name.
    if let Some((place, _)) = name.split_once(" in ")
        && place
            .rsplit_once(':')
            .is_some_and(|(_, line)| line.parse::<u32>().is_ok())
    {
        return name.to_owned();
    }
    let mut out = String::with_capacity(name.len());
    let mut depth = 0usize;
    let mut chars = name.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        let opener = matches!(c, '<' | '(');
        let closer = matches!(c, '>' | ')');
        if depth == 0 && c == '(' && name[at..].starts_with("(anonymous namespace)") {
            out.push_str("(anonymous namespace)");
            for _ in 1.."(anonymous namespace)".chars().count() {
                chars.next();
            }
            continue;
        }
        if depth == 0 && (opener || closer) && name[..at].ends_with("operator") {
            out.push(c);
            // `operator()`, `operator<<`, `operator<=`: the rest of the operator too.
            while let Some(&(_, next)) = chars.peek() {
                if matches!(next, '<' | '>' | '=' | ')') && next != '(' {
                    out.push(next);
                    chars.next();
                } else {
                    break;
                }
            }
            continue;
        }
        if opener {
            if depth == 0 {
                out.push(c);
                // `f()`: nothing to fold.
                if !chars
                    .peek()
                    .is_some_and(|&(_, next)| matches!(next, ')' | '>'))
                {
                    out.push('…');
                }
            }
            depth += 1;
        } else if closer && depth > 0 {
            depth -= 1;
            if depth == 0 {
                out.push(c);
            }
        } else if depth == 0 {
            out.push(c);
        }
    }
    out
}

/// A call site: `file+0xOFFSET function`, the module's file name first and whole; the
/// function demangled, folded unless `full`.
pub fn call_site(module: &str, offset: u64, symbol: Option<&str>, full: bool) -> String {
    // A Python frame: `train.py:57 in load_batch` (the offset is the line).
    if let Some(path) = module.strip_prefix(hotpin_history::history::PYTHON_MODULE) {
        let mut parts = path.rsplit('/');
        let name = parts.next().unwrap_or(path);
        // A package's `__init__.py` says nothing alone: `cupy/__init__.py`.
        let file = match (name, parts.next()) {
            ("__init__.py" | "__main__.py", Some(package)) => format!("{package}/{name}"),
            _ => name.to_owned(),
        };
        return match symbol {
            Some(function) => format!("{file}:{offset} in {function}"),
            None => format!("{file}:{offset}"),
        };
    }
    let file = hotpin_history::history::module_file_name(module);
    match symbol {
        Some(symbol) => {
            let name = demangle(symbol);
            let name = if full { name } else { fold(&name) };
            format!("{file}+{offset:#x} {name}")
        }
        None => format!("{file}+{offset:#x}"),
    }
}

/// `text` in at most `width` characters: its first word (a module's file name) is kept
/// whole; what follows is shortened in the middle, with `…`.
pub fn shorten(text: &str, width: usize) -> String {
    let count = text.chars().count();
    if count <= width {
        return text.to_owned();
    }
    let head_len = text
        .find(' ')
        .map_or(count, |at| text[..at].chars().count());
    if head_len + 4 >= width {
        // The module alone fills the width: it stays whole, the function goes.
        let head: String = text.chars().take(head_len).collect();
        return if head_len < count {
            format!("{head} …")
        } else {
            head
        };
    }
    let keep = width - head_len - 1; // the characters kept after the head, `…` aside
    let rest: Vec<char> = text.chars().skip(head_len).collect();
    let front = keep.div_ceil(2);
    let back = keep - front;
    let head: String = text.chars().take(head_len).collect();
    let front: String = rest.iter().take(front).collect();
    let back: String = rest[rest.len() - back..].iter().collect();
    format!("{head}{front}…{back}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpp_and_rust_names_are_demangled() {
        assert_eq!(
            demangle("_ZN3c109alloc_cpuEm"),
            "c10::alloc_cpu(unsigned long)"
        );
        assert_eq!(
            demangle("_ZN4core3fmt5write17h0123456789abcdefE"),
            "core::fmt::write"
        );
        assert_eq!(demangle("malloc"), "malloc");
        // Not a valid mangling: kept as it is.
        assert_eq!(demangle("_Zfoo"), "_Zfoo");
    }

    #[test]
    fn templates_and_arguments_are_folded() {
        assert_eq!(fold("c10::alloc_cpu(unsigned long)"), "c10::alloc_cpu(…)");
        assert_eq!(
            fold(
                "at::native::copy_impl<float, std::vector<int, std::allocator<int> > >(at::Tensor&, bool)"
            ),
            "at::native::copy_impl<…>(…)"
        );
        assert_eq!(
            fold("std::operator<<(std::ostream&, int)"),
            "std::operator<<(…)"
        );
        assert_eq!(fold("Foo::operator()(int)"), "Foo::operator()(…)");
        assert_eq!(fold("malloc"), "malloc");
        assert_eq!(fold("f()"), "f()");
        assert_eq!(
            fold("at::cuda::(anonymous namespace)::HostAllocator::allocate(unsigned long)"),
            "at::cuda::(anonymous namespace)::HostAllocator::allocate(…)"
        );
    }

    #[test]
    fn the_module_comes_first_and_is_never_cut() {
        let site = call_site(
            "/usr/lib/python3/dist-packages/numpy/core/_multiarray_umath.cpython-312-x86_64-linux-gnu.so",
            0x175e58,
            Some("_ZN3c109alloc_cpuEm"),
            false,
        );
        assert_eq!(
            site,
            "_multiarray_umath.cpython-312-x86_64-linux-gnu.so+0x175e58 c10::alloc_cpu(…)"
        );
        let short = shorten(&site, 64);
        assert!(short.starts_with("_multiarray_umath.cpython-312-x86_64-linux-gnu.so+0x175e58"));
        assert!(short.chars().count() <= 72, "{short}");
        let long =
            "libtorch_cpu.so+0x10 at::native::a_very_long_function_name_in_the_middle_of_things";
        let short = shorten(long, 44);
        assert_eq!(short.chars().count(), 44, "{short}");
        assert!(short.starts_with("libtorch_cpu.so+0x10 at::"), "{short}");
        assert!(short.ends_with("things"), "{short}");
        assert!(short.contains('…'));
        assert_eq!(
            shorten("libc.so.6+0x10 malloc", 44),
            "libc.so.6+0x10 malloc"
        );
    }

    #[test]
    fn python_frames_read_as_file_line_and_function_and_are_never_folded() {
        let name = call_site("python:/home/u/train.py", 57, Some("load_batch"), false);
        assert_eq!(name, "train.py:57 in load_batch");
        assert_eq!(fold("train.py:44 in <module>"), "train.py:44 in <module>");
        assert_eq!(
            fold("model.py:9 in Net.forward.<locals>.step"),
            "model.py:9 in Net.forward.<locals>.step"
        );
        assert_eq!(fold("f<int>(char)"), "f<…>(…)");
        assert_eq!(
            call_site(
                "python:/x/site-packages/cupy/__init__.py",
                851,
                Some("asnumpy"),
                false
            ),
            "cupy/__init__.py:851 in asnumpy"
        );
    }
}
