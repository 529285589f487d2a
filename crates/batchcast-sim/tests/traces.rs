//! Each trace format parsed from a small sample written by the test, and
//! malformed records refused with file, record and field named.

mod common;

use std::path::Path;

use batchcast_sim::trace::{parse_datetime, read_file, Format, Parsed};
use batchcast_sim::SimError;

fn write(dir: &Path, name: &str, body: &str) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, body).unwrap();
    p
}

/// The trace that `body`, written as `name` in a temporary directory,
/// gives read as a `format` trace.
fn read(name: &str, body: &str, format: Format) -> Parsed {
    let dir = tempfile::tempdir().unwrap();
    read_file(&write(dir.path(), name, body), format).expect("a readable sample trace")
}

/// The record and field that reading `body`, written as `name` in a
/// temporary directory, as a `format` trace is refused for; the refusal
/// must name the file too.
fn refused(name: &str, body: &str, format: Format) -> (usize, String) {
    let dir = tempfile::tempdir().unwrap();
    match read_file(&write(dir.path(), name, body), format).unwrap_err() {
        SimError::Parse {
            file,
            record,
            field,
            ..
        } => {
            assert!(file.ends_with(name), "{file} is not {name}");
            (record, field)
        }
        other => panic!("{name}: expected a parse error, got {other}"),
    }
}

#[test]
fn batchcast_json_job_list() {
    let t = read(
        "jobs.json",
        r#"[
 {"job_id": 0, "job_group_id": 0, "arrival_time": 100, "total_iterations": 1000, "time_per_iteration": 0.5,
  "max_parallelism": 4, "cross_slot_slowdown": 1.0, "cross_machine_slowdown": 1.4, "cross_rack_slowdown": 2.2},
 {"job_id": "h1", "start_time": 160, "total_iterations": 10, "time_per_iteration": 3, "max_parallelism": 8,
  "cross_slot_slowdown": 1.1, "cross_machine_slowdown": 1.5, "cross_rack_slowdown": 1.9,
  "dataset": "imagenet", "model": "resnet50", "gpu_util": 80, "cpu_num": 12, "duration": 30, "submit_time": 160}
]"#,
        Format::Batchcast,
    );
    assert_eq!(t.jobs.len(), 2);
    let (a, b) = (&t.jobs[0], &t.jobs[1]);
    assert_eq!(
        (a.id.as_str(), a.arrival, a.gpus, a.iterations, a.iter_time),
        ("0", 0.0, 4, 1000.0, 0.5)
    );
    assert_eq!(
        (a.slowdown.cross_machine, a.slowdown.cross_rack),
        (1.4, 2.2)
    );
    assert_eq!(
        (b.id.as_str(), b.arrival, b.gpus, b.cpu),
        ("h1", 60.0, 8, 12.0)
    );
    assert_eq!(
        (b.dataset.as_str(), b.model.as_str()),
        ("imagenet", "resnet50")
    );
}

#[test]
fn helios_cluster_log_csv() {
    let t = read(
        "cluster_log.csv",
        "job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue\n\
         j1,u1,vc1,8,48,1,COMPLETED,2020-04-01 00:00:10,2020-04-01 00:00:12,2020-04-01 01:00:12,3600,2\n\
         j2,u2,vc1,0,4,1,COMPLETED,2020-04-01 00:00:20,2020-04-01 00:00:20,2020-04-01 00:01:20,60,0\n\
         j3,u1,vc2,16,96,2,FAILED,2020-04-01 00:01:10,2020-04-01 00:02:00,2020-04-01 00:12:00,,50\n",
        Format::Helios,
    );
    assert_eq!((t.jobs.len(), t.skipped), (2, 1));
    assert_eq!(
        (
            t.jobs[0].id.as_str(),
            t.jobs[0].gpus,
            t.jobs[0].iterations,
            t.jobs[0].cpu
        ),
        ("j1", 8, 3600.0, 48.0)
    );
    assert_eq!(
        (t.jobs[1].arrival, t.jobs[1].gpus, t.jobs[1].iterations),
        (60.0, 16, 600.0)
    );
}

#[test]
fn philly_cluster_job_log_json() {
    let t = read(
        "cluster_job_log",
        r#"[
 {"status": "Pass", "vc": "vc1", "jobid": "application_1", "user": "u1", "submitted_time": "2017-10-03 08:00:00",
  "attempts": [
   {"start_time": "2017-10-03 08:01:00", "end_time": "2017-10-03 08:11:00", "detail": [{"ip": "m1", "gpus": ["gpu0"]}]},
   {"start_time": "2017-10-03 09:00:00", "end_time": "2017-10-03 10:00:00",
    "detail": [{"ip": "m1", "gpus": ["gpu0", "gpu1"]}, {"ip": "m2", "gpus": ["gpu0", "gpu1"]}]}]},
 {"status": "Killed", "vc": "vc1", "jobid": "application_2", "user": "u2", "submitted_time": "2017-10-03 08:30:00", "attempts": []},
 {"status": "Pass", "vc": "vc2", "jobid": "application_3", "user": "u2", "submitted_time": "2017-10-03 08:10:00",
  "attempts": [{"start_time": "2017-10-03 08:10:00", "end_time": "None", "detail": [{"ip": "m3", "gpus": ["gpu3"]}]},
               {"start_time": "2017-10-03 08:20:00", "end_time": "2017-10-03 08:30:00", "detail": [{"ip": "m3", "gpus": ["gpu3"]}]}]}
]"#,
        Format::Philly,
    );
    assert_eq!((t.jobs.len(), t.skipped), (2, 1));
    let (a, c) = (&t.jobs[0], &t.jobs[1]);
    assert_eq!(
        (a.id.as_str(), a.arrival, a.gpus, a.iterations),
        ("application_1", 0.0, 4, 4200.0)
    );
    assert_eq!((c.arrival, c.gpus, c.iterations), (600.0, 1, 600.0));
}

/// Each case: a sample's file name, format and text, and the record and
/// field its refusal names.
#[test]
fn malformed_records_are_refused_naming_file_record_and_field() {
    let cases = [
        (
            "bad.json",
            Format::Batchcast,
            r#"[{"job_id": 1, "arrival_time": 0, "total_iterations": 5, "time_per_iteration": 1, "max_parallelism": 2},
        {"job_id": 2, "arrival_time": 0, "total_iterations": 5, "time_per_iteration": 1, "max_parallelism": 1.5}]"#,
            2,
            "max_parallelism",
        ),
        (
            "slow.json",
            Format::Batchcast,
            r#"[{"job_id": 1, "arrival_time": 0, "total_iterations": 5, "time_per_iteration": 1, "max_parallelism": 2, "cross_rack_slowdown": 0.5}]"#,
            1,
            "cross_rack_slowdown",
        ),
        ("broken.json", Format::Batchcast, "[{", 0, "(json)"),
        (
            "bad.csv",
            Format::Helios,
            "job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue\n\
             j1,u1,vc1,8,48,1,COMPLETED,2020-04-01 00:00:10,,,3600,2\n\
             j2,u1,vc1,8,48,1,COMPLETED,yesterday,,,3600,2\n",
            2,
            "submit_time",
        ),
        ("nocol.csv", Format::Helios, "job_id,user\nj1,u1\n", 0, "gpu_num"),
        (
            "bad_log",
            Format::Philly,
            r#"[{"jobid": "a", "submitted_time": "2017-10-03 08:00:00",
        "attempts": [{"start_time": "2017-10-03 08:01:00", "end_time": "2017-10-03 08:02:00", "detail": [{"ip": "m1", "gpus": 3}]}]}]"#,
            1,
            "attempts[0].detail.gpus",
        ),
    ];
    for (name, format, body, record, field) in cases {
        assert_eq!(
            refused(name, body, format),
            (record, field.into()),
            "{name}"
        );
    }
}

#[test]
fn timestamps_and_missing_files() {
    assert_eq!(parse_datetime("1970-01-02 00:00:01"), Some(86_401.0));
    assert_eq!(
        parse_datetime("2020-03-01 00:00:00").map(|s| s as i64),
        Some(1_583_020_800)
    );
    assert_eq!(parse_datetime("12.5"), Some(12.5));
    assert_eq!(parse_datetime("2020-13-01 00:00:00"), None);
    // Seconds of a minute are finite, not negative and below 61.
    for bad in ["NaN", "inf", "-1", "61", "1e9", "-0.5"] {
        assert_eq!(
            parse_datetime(&format!("2020-01-01 00:00:{bad}")),
            None,
            "{bad}"
        );
    }
    assert_eq!(parse_datetime("1970-01-01 00:00:60.5"), Some(60.5));
    // A year whose days would overflow the arithmetic is no timestamp.
    assert_eq!(parse_datetime("9000000000000000000-01-01 00:00:00"), None);
    assert_eq!(parse_datetime("0-01-01 00:00:00"), None);
    // Calendar edges: the epoch, leap days, the last four-digit day.
    assert_eq!(parse_datetime("1970-01-01 00:00:00"), Some(0.0));
    assert_eq!(parse_datetime("1969-12-31T23:59:59Z"), Some(-1.0));
    assert_eq!(parse_datetime("2024-02-29 12:00:00"), Some(1_709_208_000.0));
    assert_eq!(parse_datetime("2000-02-29 00:00:00"), Some(951_782_400.0));
    assert_eq!(parse_datetime("2023-02-29 00:00:00"), None);
    assert_eq!(parse_datetime("1900-02-29 00:00:00"), None);
    assert_eq!(parse_datetime("2024-04-31 00:00:00"), None);
    assert_eq!(
        parse_datetime("9999-12-31 23:59:59"),
        Some(253_402_300_799.0)
    );
    assert_eq!(
        parse_datetime("0001-01-01 00:00:00"),
        Some(-62_135_596_800.0)
    );
    let e = read_file(Path::new("/nonexistent/trace.json"), Format::Dally)
        .unwrap_err()
        .to_string();
    common::assert_says(&e, "/nonexistent/trace.json");
    common::assert_says(&e, "cannot read");
}

/// A job id or dataset name from a trace with a comma, a quote, a carriage
/// return or a newline stays one field of the per-job CSV.
#[test]
fn per_job_csv_quotes_every_field_a_reader_would_split() {
    let mut a = common::job("a,\"b\"", 0.0, 1, 10.0);
    a.dataset = "imagenet\r\nsplit".into();
    let b = common::job("plain", 0.0, 1, 10.0);
    let o = common::run_policy(
        "fifo",
        batchcast_sim::ClusterSpec::new(1, 1, 2, 64.0),
        &batchcast_sim::SimConfig::default(),
        &[a, b],
    );
    let text = batchcast_sim::jobs_csv(&o);
    let mut r = csv::Reader::from_reader(text.as_bytes());
    let rows: Vec<csv::StringRecord> = r.records().map(|r| r.expect("a CSV row")).collect();
    assert_eq!(rows.len(), 2, "{text}");
    assert_eq!(&rows[0][0], "a,\"b\"");
    assert_eq!(&rows[0][13], "imagenet\r\nsplit");
    assert_eq!(&rows[1][0], "plain");
    assert_eq!(&rows[1][5], "10.000", "{text}");
}
