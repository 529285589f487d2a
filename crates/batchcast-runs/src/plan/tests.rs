use super::*;

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// A temporary directory holding an empty `train.py`, the script the
/// plans of these tests run.
fn dir_with_script() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "train.py", "");
    dir
}

/// The plan that `text`, written as `name` beside an empty `train.py`,
/// loads as.
fn loaded(name: &str, text: &str) -> Plan {
    let dir = dir_with_script();
    Plan::load(&write(dir.path(), name, text)).unwrap()
}

#[test]
fn a_csv_plan_groups_rows_into_workloads() {
    let p = loaded(
        "plan.csv",
        "Experiment,Workload,Name,Status,Devices,Collocation,Listeners,Data,File,Params\n\
         e,own,a,,,-,,,train.py,--lr 0.1\n\
         e,own,b,FINISHED,0;1,MPS,process system,,train.py,\"--lr=0.2 --note 'two words'\"\n\
         e,shared,a,,,3g.20gb,,batchcast serve --synthetic,train.py,\n",
    );
    let w = p.workloads();
    assert_eq!(w.len(), 2);
    assert_eq!(w[0].2.len(), 2);
    let b = &p.rows[1];
    assert_eq!(b.status, Some(RunStatus::Finished));
    assert_eq!(b.devices, vec!["0", "1"]);
    assert_eq!(b.collocation, Collocation::Mps);
    assert_eq!(b.listeners, vec!["process", "system"]);
    assert_eq!(b.args, vec!["--lr=0.2", "--note", "two words"]);
    assert_eq!(
        b.params,
        vec![
            ("lr".into(), "0.2".into()),
            ("note".into(), "two words".into())
        ]
    );
    assert_eq!(p.rows[2].collocation, Collocation::Mig("3g.20gb".into()));
    assert_eq!(
        p.rows[2].data.as_deref(),
        Some("batchcast serve --synthetic")
    );
}

fn refused(name: &str, text: &str) -> PlanError {
    let dir = dir_with_script();
    Plan::load(&write(dir.path(), name, text)).unwrap_err()
}

#[test]
fn bad_plans_are_refused_with_file_row_and_problem() {
    // Each case: the plan's file name and text, what its error must say,
    // and the row it must name where the case is about a row.
    let cases: [(&str, &str, &[&str], Option<usize>); 11] = [
        (
            "p.csv",
            "Experiment,Workload,Name,File,Colour\ne,w,a,train.py,red\n",
            &["unknown column \"Colour\"", "p.csv"],
            None,
        ),
        (
            "p.csv",
            "Experiment,Workload,Name,File\ne,w,a,train.py\ne,w,b,missing.py\n",
            &["missing.py does not exist"],
            Some(2),
        ),
        (
            "p.csv",
            "Experiment,Workload,Name,File,Collocation\ne,w,a,train.py,MIGGY\n",
            &["row 1", "MIGGY"],
            None,
        ),
        (
            "p.csv",
            "Experiment,Workload,Name,File,Listeners\ne,w,a,train.py,telepathy\n",
            &["unknown listener"],
            None,
        ),
        (
            "p.csv",
            "Experiment,Workload,Name,File\ne,w,a,train.py\ne,w,a,train.py\n",
            &["appears twice"],
            None,
        ),
        (
            "p.csv",
            "Experiment,Workload,File\ne,w,train.py\n",
            &["column Name is missing"],
            None,
        ),
        ("p.csv", "Experiment,Workload,Name,File\n", &["no runs"], None),
        (
            "p.yaml",
            "runs:\n  - workload: w\n    name: a\n    file: train.py\n    colour: red\n",
            &["unknown field `colour`"],
            None,
        ),
        ("p.yaml", "runs: [unclosed\n", &["not a valid plan"], None),
        (
            "p.yaml",
            "experiment: e\nruns:\n  - workload: w\n    name: a\n    file: train.py\n    parameters: {lr: []}\n",
            &["\"lr\" has no values"],
            Some(1),
        ),
        ("p.txt", "x", &[".csv or a .yaml"], None),
    ];
    for (name, text, says, row) in cases {
        let e = refused(name, text);
        for s in says {
            assert!(e.to_string().contains(s), "{name} {text:?}: {e}");
        }
        if row.is_some() {
            assert_eq!(e.row, row, "{name} {text:?}: {e}");
        }
    }
}

#[test]
fn yaml_sweeps_expand_by_grid_and_by_seeded_draws() {
    let p = loaded(
        "grid.yaml",
        "experiment: e\nruns:\n  - workload: w\n    name: t\n    file: train.py\n    params: --epochs 1\n    \
         parameters: {lr: [0.1, 0.01], bs: [32, 64, 128]}\n",
    );
    assert_eq!(p.rows.len(), 6);
    assert_eq!(p.rows[0].name, "t-bs=32-lr=0.1");
    assert_eq!(
        p.rows[0].args,
        vec!["--epochs", "1", "--bs", "32", "--lr", "0.1"]
    );
    assert_eq!(p.rows[5].name, "t-bs=128-lr=0.01");
    let random = "experiment: e\nruns:\n  - workload: w\n    name: t\n    file: train.py\n    \
                  parameters: {lr: [0.1, 0.01, 0.001]}\n    method: random\n    count: 5\n    seed: 7\n";
    let a = loaded("r1.yaml", random);
    let b = loaded("r2.yaml", random);
    assert_eq!(a.rows.len(), 5);
    assert_eq!(a.rows, b.rows, "the same seed draws the same runs");
    let other = loaded("r3.yaml", &random.replace("seed: 7", "seed: 8"));
    assert_ne!(
        a.rows.iter().map(|r| &r.params).collect::<Vec<_>>(),
        other.rows.iter().map(|r| &r.params).collect::<Vec<_>>()
    );
}

#[test]
fn a_sweep_that_would_copy_its_entry_past_the_budget_is_refused_before_it_is_copied() {
    // 4 MiB of params, 300 combinations: 1.2 GB of copies from a 4 MiB plan.
    let values: Vec<String> = (0..300).map(|i| i.to_string()).collect();
    let text = format!(
        "experiment: e\nruns:\n  - workload: w\n    name: t\n    file: train.py\n    params: --note {}\n    \
         parameters: {{lr: [{}]}}\n",
        "x".repeat(4 << 20),
        values.join(", ")
    );
    let e = refused("big.yaml", &text).to_string();
    assert!(
        e.contains("copies this entry 300 times") && e.contains("at most 256 MiB"),
        "{e}"
    );
    // Rows count across entries: two grids of 60,000 are over 100,000.
    let grid: Vec<String> = (0..60_000).map(|i| i.to_string()).collect();
    let entry = |name: &str| {
        format!(
            "  - workload: w\n    name: {name}\n    file: train.py\n    parameters: {{lr: [{}]}}\n",
            grid.join(", ")
        )
    };
    let text = format!("experiment: e\nruns:\n{}{}", entry("a"), entry("b"));
    let e = refused("many.yaml", &text).to_string();
    assert!(e.contains("at most 100000 runs"), "{e}");
}

/// The typed errors of a YAML entry's fields and sweeps read as the
/// messages users know.
#[test]
fn yaml_field_and_sweep_problems_are_named_in_words() {
    let entry = "experiment: e\nruns:\n  - workload: w\n    name: t\n    file: train.py\n";
    for (extra, message) in [
        (
            "    params: \"--note 'open\"\n",
            "params \"--note 'open\" has an unclosed quote",
        ),
        (
            "    devices: {a: 1}\n",
            "devices is neither a string nor a list",
        ),
        (
            "    listeners: [[cpu]]\n",
            "listeners holds a value that is not a scalar",
        ),
        (
            "    parameters: {lr: []}\n",
            "the sweep parameter \"lr\" has no values",
        ),
        (
            "    parameters: {lr: [1]}\n    method: random\n    count: 0\n",
            "a random sweep's count must be at least 1",
        ),
        (
            "    collocation: MIGGY\n",
            "Collocation \"MIGGY\" is none of `-`, `MPS` or a MIG profile such as `3g.20gb`",
        ),
    ] {
        let e = refused("p.yaml", &format!("{entry}{extra}")).to_string();
        assert!(e.contains(message), "{e}");
    }
}

/// A sweep after entries that already fill the plan says how many runs
/// it asks for and that none are left, not "more than 0 combinations".
#[test]
fn a_sweep_past_the_plan_limit_says_how_many_it_asks_for() {
    let grid: Vec<String> = (0..100_000).map(|i| i.to_string()).collect();
    let text = format!(
        "experiment: e\nruns:\n  - workload: w\n    name: a\n    file: train.py\n    \
         parameters: {{lr: [{}]}}\n  - workload: w\n    name: b\n    file: train.py\n    \
         parameters: {{lr: [1, 2], wd: [3, 4, 5]}}\n",
        grid.join(", ")
    );
    let e = refused("full.yaml", &text).to_string();
    assert!(!e.contains("more than 0"), "{e}");
    assert!(
        e.contains("the grid has 6 combinations, and the entries before it leave no room for any")
            && e.contains("at most 100000 runs"),
        "{e}"
    );
    let text = text.replace(
        "parameters: {lr: [1, 2], wd: [3, 4, 5]}",
        "method: random\n    count: 7\n    parameters: {lr: [1, 2]}",
    );
    let e = refused("full.yaml", &text).to_string();
    assert!(e.contains("the random sweep draws 7 combinations"), "{e}");
}

#[test]
fn status_is_written_back_into_a_csv_plan() {
    let dir = dir_with_script();
    let path = write(
        dir.path(),
        "p.csv",
        "Experiment,Workload,Name,File\ne,w,a,train.py\ne,w,b,train.py\n",
    );
    let status = [(2, RunStatus::Failed)].into_iter().collect();
    csv::write_status(&path, &status).unwrap();
    let p = Plan::load(&path).unwrap();
    assert_eq!(p.rows[0].status, None);
    assert_eq!(p.rows[1].status, Some(RunStatus::Failed));
}

/// The example plans in the repository stay valid.
#[test]
fn the_example_plans_load() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/run");
    let csv = Plan::load(&dir.join("plan.csv")).unwrap();
    assert_eq!(csv.workloads().len(), 2);
    let yaml = Plan::load(&dir.join("sweep.yaml")).unwrap();
    assert_eq!(yaml.rows.len(), 4);
    assert_eq!(yaml.rows[0].args, vec!["--epochs", "1", "--lr", "0.1"]);
}

#[test]
fn a_plan_built_in_code_has_the_rows_and_data_of_a_file() {
    let dir = dir_with_script();
    let mut b = Plan::builder("<test>", dir.path());
    for w in ["own", "shared"] {
        for n in ["a", "b"] {
            let cmd: Vec<String> = ["train.py", "--lr", "0.1"].map(String::from).to_vec();
            b.run("e", w, n, &cmd).listeners = vec!["process".into()];
        }
    }
    let serve: Vec<String> = ["batchcast", "serve", "--name", "two words"]
        .map(String::from)
        .to_vec();
    b.data("e", "shared", &serve);
    let p = b.build().unwrap();
    assert_eq!(p.file, PathBuf::from("<test>"));
    let w = p.workloads();
    assert_eq!(w.len(), 2);
    assert!(w[0].2.iter().all(|r| r.data.is_none()));
    for r in &w[1].2 {
        let data = r.data.as_deref().unwrap();
        assert_eq!(shlex::split(data).unwrap(), serve);
    }
    let a = &p.rows[0];
    assert_eq!((a.row, a.file.as_str()), (1, "train.py"));
    assert_eq!(a.args, vec!["--lr", "0.1"]);
    assert_eq!(a.params, vec![("lr".into(), "0.1".into())]);
    assert_eq!(a.listeners, vec!["process"]);
    assert_eq!(p.resolve(&a.file), dir.path().join("train.py"));
}

#[test]
fn a_plan_built_in_code_is_checked_like_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let cmd = |f: &str| vec![f.to_string()];
    let mut b = Plan::builder("<test>", dir.path());
    b.run("e", "w", "a", &cmd("missing.py"));
    let e = b.build().unwrap_err().to_string();
    assert!(
        e.contains("<test>, row 1") && e.contains("missing.py"),
        "{e}"
    );

    let mut b = Plan::builder("<test>", dir.path());
    b.run("e", "w", "a", &cmd("true"));
    b.run("e", "w", "a", &cmd("true"));
    let e = b.build().unwrap_err().to_string();
    assert!(e.contains("appears twice"), "{e}");

    let mut b = Plan::builder("<test>", dir.path());
    b.run("e", "w", "a", &[]);
    let e = b.build().unwrap_err().to_string();
    assert!(e.contains("File is empty"), "{e}");

    let mut b = Plan::builder("<test>", dir.path());
    b.run("e", "w", "a", &cmd("true")).listeners = vec!["nonsense".into()];
    assert!(b.build().is_err());

    let mut b = Plan::builder("<test>", dir.path());
    b.run("e", "w", "a", &cmd("true"));
    b.data("e", "other", &cmd("batchcast"));
    let e = b.build().unwrap_err().to_string();
    assert!(e.contains("e/other, which has no runs"), "{e}");

    assert!(Plan::builder("<test>", dir.path()).build().is_err());
}

#[test]
fn a_plan_built_in_code_never_writes_statuses_into_a_file_named_like_its_label() {
    let dir = tempfile::tempdir().unwrap();
    let label = dir.path().join("runs.csv");
    let text = "not a plan, the user's own file\n";
    write(dir.path(), "runs.csv", text);
    let mut b = Plan::builder(label.to_str().unwrap(), dir.path());
    b.run("e", "w", "a", &["true".to_string()]);
    let p = b.build().unwrap();
    assert!(!p.from_file);
    let status = [(1, RunStatus::Failed)].into_iter().collect();
    p.record_status(&status).unwrap();
    assert_eq!(std::fs::read_to_string(&label).unwrap(), text);
}
