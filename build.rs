//! Builds the C++ glue (rust/glue/foo_glue.cpp) against the headers of the
//! torch installed in the build's Python, when the `python` feature is on.
//! Plain `cargo test` / `cargo bench` skip all of this.

use std::env;
use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=rust/glue/foo_glue.cpp");
    println!("cargo:rerun-if-env-changed=PYO3_PYTHON");
    println!("cargo:rerun-if-env-changed=FOO_RS_PYTHON");
    if env::var_os("CARGO_FEATURE_PYTHON").is_none() {
        return;
    }

    let python = env::var("FOO_RS_PYTHON")
        .or_else(|_| env::var("PYO3_PYTHON"))
        .unwrap_or_else(|_| "python3".to_string());
    let probe = r#"
import torch, torch.utils.cpp_extension as ce, os
print(torch.__version__)
print(int(torch.compiled_with_cxx11_abi()))
print(os.path.join(os.path.dirname(torch.__file__), "lib"))
for p in ce.include_paths():
    print(p)
"#;
    let out = Command::new(&python)
        .args(["-c", probe])
        .output()
        .unwrap_or_else(|e| panic!("foo_rs build: cannot run {python}: {e}"));
    if !out.status.success() {
        panic!(
            "foo_rs build: `{python}` cannot import torch (install torch>=2.13,<2.14 first):\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let text = String::from_utf8(out.stdout).expect("utf-8 from python");
    let mut lines = text.lines();
    let version = lines.next().expect("torch version");
    let cxx11_abi = lines.next().expect("cxx11 abi flag");
    let torch_lib = PathBuf::from(lines.next().expect("torch lib dir"));
    let includes: Vec<&str> = lines.collect();
    if !version.starts_with("2.13") {
        println!(
            "cargo:warning=foo_rs is tested with torch 2.13; building against torch {version} may fail to compile or misbehave"
        );
    }

    let mut build = cc::Build::new();
    build
        .cpp(true)
        .file("rust/glue/foo_glue.cpp")
        .std("c++17")
        .define("_GLIBCXX_USE_CXX11_ABI", cxx11_abi)
        .flag_if_supported("-Wno-unused-parameter")
        .flag_if_supported("-Wno-deprecated-declarations")
        .flag_if_supported("-fvisibility=hidden")
        .warnings(false)
        .opt_level(2)
        .debug(false)
        // Static initialisers (allocator, guard, kernel registration) must
        // survive the link even though Rust references few symbols.
        .link_lib_modifier("+whole-archive");
    for inc in &includes {
        build.include(inc);
    }
    build.compile("foo_glue");

    // Link against torch's own libraries, never copies of them: at run time
    // `import torch` has already loaded them and the loader reuses them by
    // soname; the rpaths cover a direct load.
    println!("cargo:rustc-link-search=native={}", torch_lib.display());
    println!("cargo:rustc-link-lib=dylib=c10");
    println!("cargo:rustc-link-lib=dylib=torch_cpu");
    println!("cargo:rustc-link-lib=dylib=stdc++");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-rpath,$ORIGIN/../torch/lib");
    println!(
        "cargo:rustc-cdylib-link-arg=-Wl,-rpath,{}",
        torch_lib.display()
    );
}
