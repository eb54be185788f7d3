//! `tracer report --json` has a documented schema, docs/report.schema.json, generated from
//! the types themselves (schemars): the file must be what the code generates (regenerate it
//! with `HOTPIN_WRITE_SCHEMA=1 cargo test -p hotpin-report --test schema`), and a report of a
//! history with every section filled validates against it (jsonschema).

use hotpin_history::{
    MemHistory,
    history::{AllocKind, CallSite},
};
use hotpin_policy::hot::HotPolicy;
use hotpin_registry::registry::CopyDirection;
use hotpin_report::Report;

fn schema_file() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/report.schema.json")
}

#[test]
fn the_documented_schema_is_the_one_the_code_generates() {
    let generated = serde_json::to_string_pretty(&schemars::schema_for!(Report))
        .expect("the schema as JSON")
        + "\n";
    if std::env::var_os("HOTPIN_WRITE_SCHEMA").is_some() {
        std::fs::write(schema_file(), &generated).expect("write docs/report.schema.json");
    }
    let documented = std::fs::read_to_string(schema_file()).expect("docs/report.schema.json");
    assert_eq!(
        documented, generated,
        "docs/report.schema.json is not what the code generates: regenerate it with \
         HOTPIN_WRITE_SCHEMA=1 cargo test -p hotpin-report --test schema, and read the diff"
    );
}

#[test]
fn a_report_validates_against_the_documented_schema() {
    let mut h = MemHistory::new();
    h.meta_mut().command = vec!["python".into(), "train.py".into()];
    let site = h.intern_call_site(CallSite {
        module: "/lib/libc10.so".into(),
        offset: 0x40,
        symbol: Some("_ZN3c109alloc_cpuEm".into()),
    });
    // Hot pageable, pinned and wasted, a recycled group, device memory left, a mapping.
    h.alloc(1, 0x10_0000, 64 << 20, AllocKind::Pageable, Some(site), 0);
    for t in 0..10 {
        h.transfer(
            1,
            0xd000_0000,
            0x10_0000,
            64 << 20,
            CopyDirection::HostToDevice,
            t,
        );
    }
    h.alloc(1, 0x4000_0000, 24 << 20, AllocKind::Pinned, Some(site), 0);
    for i in 0..4u64 {
        let at = 0x5000_0000 + i * 0x100_0000;
        h.alloc(
            1,
            at,
            8 << 20,
            AllocKind::Pageable,
            Some(site),
            100 + i * 10,
        );
        h.transfer(
            1,
            at,
            0xd000_0000,
            8 << 20,
            CopyDirection::DeviceToHost,
            101 + i * 10,
        );
        h.free(1, at, 102 + i * 10);
    }
    h.alloc(1, 0xe000_0000, 32 << 20, AllocKind::Device, Some(site), 0);
    h.map(1, 0x7000_0000, 16 << 20, 0);
    let report = serde_json::to_value(Report::new(&h, HotPolicy::default(), 10))
        .expect("the report as JSON");
    assert!(
        !report["hot"].as_array().expect("hot").is_empty(),
        "{report}"
    );
    assert!(
        !report["wasted_pinned"]
            .as_array()
            .expect("wasted")
            .is_empty(),
        "{report}"
    );
    let schema: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(schema_file()).expect("docs/report.schema.json"),
    )
    .expect("the schema parses");
    let validator = jsonschema::validator_for(&schema).expect("a valid JSON Schema");
    let errors: Vec<String> = validator
        .iter_errors(&report)
        .map(|e| format!("{e} at {}", e.instance_path()))
        .collect();
    assert!(errors.is_empty(), "{errors:#?}");
    // Not vacuous: a report with a field of the wrong type is refused.
    let mut wrong = report.clone();
    wrong["calls"] = serde_json::json!("many");
    assert!(!validator.is_valid(&wrong));
}
