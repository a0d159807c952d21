//! Builds the C++ glue (rust/glue/*.cpp) against the headers of the
//! torch installed in the build's Python, when the `python` feature is on.
//! Plain `cargo test` / `cargo bench` skip all of this.

use std::env;
use std::path::PathBuf;
use std::process::Command;

/// The torch versions foo_rs supports, `(lower, upper)` as `(major, minor)`
/// with the upper bound excluded, read from the one place they are written:
/// the `torch>=A.B,<C.D` requirement in pyproject.toml (foo_rs/_torch_check.py
/// reads the same requirement from the installed package's metadata).
fn supported_torch() -> ((u32, u32), (u32, u32)) {
    println!("cargo:rerun-if-changed=pyproject.toml");
    let text = std::fs::read_to_string("pyproject.toml").expect("pyproject.toml");
    let spec = text
        .split('"')
        .find(|s| s.starts_with("torch>="))
        .expect("pyproject.toml: a \"torch>=A.B,<C.D\" dependency");
    let parse = |v: &str| -> (u32, u32) {
        let mut it = v
            .trim()
            .split('.')
            .map(|p| p.parse::<u32>().expect("torch version bound"));
        (it.next().expect("major"), it.next().unwrap_or(0))
    };
    let (lo, hi) = spec["torch>=".len()..]
        .split_once(",<")
        .expect("torch>=A.B,<C.D");
    (parse(lo), parse(hi))
}

/// The C++ standard the installed torch's headers require: torch 2.15's
/// `ATen/ATen.h` refuses anything before C++20, older ones build as C++17
/// (what torch.utils.cpp_extension passes for each). Read from the header
/// itself, so the glue follows the torch it is built against.
fn cxx_standard(includes: &[&str]) -> &'static str {
    for inc in includes {
        let header = PathBuf::from(inc).join("ATen").join("ATen.h");
        if let Ok(text) = std::fs::read_to_string(&header) {
            println!("cargo:rerun-if-changed={}", header.display());
            return if text.contains("202002L") {
                "c++20"
            } else {
                "c++17"
            };
        }
    }
    "c++17"
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=rust/glue/foo_glue.cpp");
    println!("cargo:rerun-if-changed=rust/glue/native.cpp");
    println!("cargo:rerun-if-changed=rust/glue/autocast.cpp");
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
            "foo_rs build: `{python}` cannot import torch (install torch>=2.13,<2.16 first):\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let text = String::from_utf8(out.stdout).expect("utf-8 from python");
    let mut lines = text.lines();
    let version = lines.next().expect("torch version");
    let cxx11_abi = lines.next().expect("cxx11 abi flag");
    let torch_lib = PathBuf::from(lines.next().expect("torch lib dir"));
    let includes: Vec<&str> = lines.collect();
    // Another torch installed into the same environment rebuilds the glue.
    if let Some(torch_dir) = torch_lib.parent() {
        println!(
            "cargo:rerun-if-changed={}",
            torch_dir.join("version.py").display()
        );
    }
    let (lo, hi) = supported_torch();
    let mut parts = version
        .split(['.', '+'])
        .map(|p| p.parse::<u32>().unwrap_or(0));
    let this = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    if this < lo || this >= hi {
        println!(
            "cargo:warning=foo_rs supports torch >={}.{},<{}.{}; building against torch {version} may fail to compile or misbehave",
            lo.0, lo.1, hi.0, hi.1
        );
    }
    // The version the glue was compiled against: foo_rs refuses to load
    // under another one (its C++ ABI is that torch's).
    println!("cargo:rustc-env=FOO_RS_BUILT_TORCH={version}");
    let std = cxx_standard(&includes);

    let mut build = cc::Build::new();
    build
        .cpp(true)
        .file("rust/glue/foo_glue.cpp")
        .file("rust/glue/native.cpp")
        .file("rust/glue/autocast.cpp")
        .std(std)
        .define("_GLIBCXX_USE_CXX11_ABI", cxx11_abi)
        // torch's release builds compile its headers' inline code with NDEBUG
        // (debug-only assertions off, e.g. RecordFunction::inputs() checks a
        // flag only debug builds of torch set); the glue must see the same code.
        .define("NDEBUG", None)
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
        // Kineto's headers (torch ships them in include/kineto) include each
        // other by bare name; the glue's profiler plugin needs them.
        let kineto = PathBuf::from(inc).join("kineto");
        if kineto.join("IActivityProfiler.h").exists() {
            build.include(kineto).define("USE_KINETO", None);
        }
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
