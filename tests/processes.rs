//! Suites that build many OpenCL programs cold, spread over two processes. PoCL compiles one program at a time in a
//! process (its kernel compiler is behind one lock: two threads building at once take as long as one building
//! both), so a suite's second core is used only from a second process. [`across_processes`] runs a test's items
//! split between the test's own process and a child running the same test of the same binary, and gathers the
//! child's results from its output.

use std::io::Read;
use std::process::{Command, Stdio};

/// Processes a suite's items are spread over.
const PROCESSES: usize = 2;
/// The environment variable that makes a test's process a child: it holds the child's share (1 to
/// `PROCESSES - 1`).
const SHARD: &str = "STOWAGE_TEST_SHARD";
/// How a child's output line carries an item's result: this, the item's index, a tab, the error as JSON (`null`
/// when the item passed).
const MARK: &str = "@@stowage-item ";

/// `run` over every item, in order of the items, each run in this process or in a child running the test named
/// `test` (its full name, as `--exact` takes it) of this test binary: item `i` runs in share `i % PROCESSES`. In
/// the child the test's code runs up to its call of this function, which prints the child's results and ends the
/// process; everything the child prints besides is passed on. An item the child did not report (it crashed) is an
/// error saying so.
pub fn across_processes<I>(test: &str, items: &[I], run: impl Fn(&I) -> Result<(), String>) -> Vec<Result<(), String>> {
    if let Ok(share) = std::env::var(SHARD) {
        let share: usize = share.parse().unwrap_or_else(|_| panic!("{SHARD}={share} is not a number"));
        for (i, item) in items.iter().enumerate().filter(|(i, _)| i % PROCESSES == share) {
            let error = run(item).err();
            println!("{MARK}{i}\t{}", serde_json::to_string(&error).expect("a string is JSON"));
        }
        std::process::exit(0);
    }
    let exe = std::env::current_exe().expect("the running test binary");
    let children: Vec<_> = (1..PROCESSES)
        .map(|share| {
            let mut child = Command::new(&exe)
                .args([test, "--exact", "--nocapture", "--test-threads=1", "-q"])
                .env(SHARD, share.to_string())
                .stdout(Stdio::piped())
                .spawn()
                .unwrap_or_else(|e| panic!("starting {} for {test}: {e}", exe.display()));
            let mut out = child.stdout.take().expect("piped");
            // Read as it comes, so that the child never waits on a full pipe while this process works.
            let reader = std::thread::spawn(move || {
                let mut text = String::new();
                let _ = out.read_to_string(&mut text);
                text
            });
            (child, reader)
        })
        .collect();
    let mut results: Vec<Option<Result<(), String>>> = (0..items.len()).map(|_| None).collect();
    for (i, item) in items.iter().enumerate().filter(|(i, _)| i % PROCESSES == 0) {
        results[i] = Some(run(item));
    }
    let mut ended = Vec::new();
    for (mut child, reader) in children {
        let status = child.wait().map_or_else(|e| e.to_string(), |s| s.to_string());
        for line in reader.join().unwrap_or_default().lines() {
            let item = line
                .strip_prefix(MARK)
                .and_then(|l| l.split_once('\t'))
                .and_then(|(i, e)| Some((i.parse::<usize>().ok()?, serde_json::from_str::<Option<String>>(e).ok()?)));
            match item {
                Some((i, error)) if i < results.len() => results[i] = Some(error.map_or(Ok(()), Err)),
                _ => println!("{line}"),
            }
        }
        ended.push(status);
    }
    results
        .into_iter()
        .map(|r| {
            r.unwrap_or_else(|| Err(format!("not reported by the child process running it ({})", ended.join(", "))))
        })
        .collect()
}
