//! `dmabridge bench [--json] [--quick] [--report DIR] [--compare OLD.json [NEW.json]]`: see
//! `dmabridge_lab::bench` for what each path's time covers. `--json` prints the
//! contract JSON on stdout; otherwise a table, the ratios and a PNG plot (`--plot`, default
//! bench-out/bench.png). `--report DIR` writes `DIR/index.html` (the page of
//! `dmabridge_lab::bench::html`), `DIR/bench.json` and `DIR/bench.png`. `--compare`
//! prints the change of every figure since OLD on stdout (on stderr with `--json`, whose
//! stdout is the JSON) and puts it in the report; with NEW as well, nothing is measured: the
//! two files are compared. A progress bar runs on stderr.

use std::path::PathBuf;
use std::process::ExitCode;

use dmabridge::{Engine, EngineOptions};
use dmabridge_lab::bench::figures::{changes_text, compare, read_report, Figures};
use dmabridge_lab::bench::html::render;
use dmabridge_lab::bench::options::BenchOptions;
use dmabridge_lab::bench::plot::write_plot;
use dmabridge_lab::bench::results::{BenchReport, BesideLinear, ConvertResult};
use dmabridge_lab::picture::font;

#[derive(clap::Args)]
pub struct BenchArgs {
    /// Print the JSON report (a contract other tools read) instead of the table.
    #[arg(long)]
    json: bool,
    /// Drop 8K and use fewer repetitions.
    #[arg(long)]
    quick: bool,
    /// Where the plot goes (human output only).
    #[arg(long, default_value = "bench-out/bench.png")]
    plot: PathBuf,
    /// Write a self-contained report (index.html, bench.json, bench.png) into this directory.
    #[arg(long, value_name = "DIR")]
    report: Option<PathBuf>,
    /// Compare with an earlier run's JSON (and, given a second file, compare the two files
    /// without measuring anything).
    #[arg(long, value_name = "OLD.json [NEW.json]", num_args = 1..=2)]
    compare: Vec<PathBuf>,
}

/// The comparison (when asked) and the report (when asked) of the run `new`.
fn finish(args: &BenchArgs, new: &BenchReport) -> Result<(), String> {
    let figures = Figures::from_report(new).map_err(|e| e.to_string())?;
    let changes = match args.compare.first() {
        Some(old) => {
            let old = read_report(old).and_then(|r| Figures::from_report(&r)).map_err(|e| e.to_string())?;
            let c = compare(&old, &figures);
            // The table is the command's output (`--compare A B > f` keeps it), unless stdout
            // is the run's JSON.
            if args.json {
                eprint!("{}", changes_text(&c));
            } else {
                print!("{}", changes_text(&c));
            }
            Some(c)
        }
        None => None,
    };
    if let Some(dir) = &args.report {
        std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let json = serde_json::to_string_pretty(new).map_err(|e| e.to_string())?;
        let write = |name: &str, bytes: &[u8]| dmabridge::interop::user_file::write_regular(&dir.join(name), bytes).map_err(|e| e.to_string());
        write("bench.json", json.as_bytes())?;
        let page = render(&figures, "bench.json", changes.as_deref()).map_err(|e| e.to_string())?;
        write("index.html", page.as_bytes())?;
        write_plot(&dir.join("bench.png"), &figures).map_err(|e| e.to_string())?;
        eprintln!("report: {}", dir.join("index.html").display());
    }
    Ok(())
}

pub fn run(args: &BenchArgs) -> ExitCode {
    if let [_, new] = args.compare.as_slice() {
        // Two files: compare (and report) without measuring.
        let read = read_report(new).map_err(|e| e.to_string());
        return match read.and_then(|r| finish(args, &r)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("dmabridge bench: {e}");
                ExitCode::from(1)
            }
        };
    }
    if let Some(old) = args.compare.first() {
        // Refuse a bad OLD before spending minutes measuring.
        if let Err(e) = read_report(old).and_then(|r| Figures::from_report(&r).map(|_| ())) {
            eprintln!("dmabridge bench: {e}");
            return ExitCode::from(1);
        }
    }
    let engine = match Engine::new(&EngineOptions::from_env()) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("dmabridge bench: {e}");
            return ExitCode::from(1);
        }
    };
    let opts = BenchOptions { quick: args.quick };
    let bar = indicatif::ProgressBar::new(opts.steps());
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let mut first = true;
    let mut progress = |label: &str| {
        if !first {
            bar.inc(1);
        }
        first = false;
        bar.set_message(label.to_owned());
    };
    let report = match dmabridge_lab::bench::run(&engine, &opts, &mut progress) {
        Ok(r) => r,
        Err(e) => {
            bar.abandon();
            eprintln!("dmabridge bench: {e}");
            return ExitCode::from(1);
        }
    };
    bar.finish_and_clear();
    for n in &report.notes {
        eprintln!("note: {n}");
    }
    if let Err(e) = finish(args, &report) {
        eprintln!("dmabridge bench: {e}");
        return ExitCode::from(1);
    }
    if args.json {
        match serde_json::to_string(&report) {
            Ok(json) => println!("{json}"),
            Err(e) => {
                eprintln!("dmabridge bench: {e}");
                return ExitCode::from(1);
            }
        }
        return crate::exit_status(engine.adapter());
    }

    println!("dmabridge bench on {}", report.device);
    println!("memcpy baseline: {:.2} GB/s (measured in this run)", report.memcpy_gbps);
    println!();
    println!("{:<10} {:<6} {:>10} {:>14} {:>10}", "path", "format", "size", "µs/frame", "GB/s");
    for r in &report.results {
        println!("{:<10} {:<6} {:>10} {:>14.1} {:>10.2}", r.path, r.format, format!("{}x{}", r.width, r.height), r.us_per_frame, r.gbps);
    }
    if !report.convert.is_empty() {
        println!();
        println!("conversions at 4K, on the path the cost model chose (GB/s of output; GStreamer videoconvert on the same frames):");
        println!("{:<36} {:<14} {:>8} {:>9} {:>10} {:>8}", "conversion", "path", "GB/s", "x memcpy", "GStreamer", "x gst");
        for c in &report.convert {
            let gst = c.gstreamer_gbps.map_or("-".to_owned(), |g| format!("{g:.2}"));
            let vs = c.vs_gstreamer.map_or("-".to_owned(), |v| format!("{v:.1}"));
            println!(
                "{:<36} {:<14} {:>8.2} {:>9.2} {:>10} {:>8}",
                format!("{} {} -> {}", c.format, c.layout, c.to_format),
                c.path.name(),
                c.gbps,
                c.gbps / report.memcpy_gbps.max(1e-9),
                gst,
                vs
            );
        }
    }
    let peered: Vec<&ConvertResult> = report.convert.iter().filter(|c| !c.peers.is_empty()).collect();
    if !peered.is_empty() {
        println!();
        println!("CPU libraries on the same frames (GB/s of output; dmabridge / peer in total, and per thread: dmabridge on one thread / the peer on one):");
        println!("{:<28} {:<34} {:>7} {:>8} {:>11} {:>12}", "conversion", "peer", "threads", "GB/s", "x in total", "x per thread");
        for c in peered {
            let what = format!("{} {} -> {}", c.format, c.layout, c.to_format);
            for p in &c.peers {
                let f = |v: Option<f64>, digits: usize| v.map_or("-".to_owned(), |v| format!("{v:.digits$}"));
                match &p.missing {
                    Some(why) => println!("{what:<28} {:<34} missing: {why}", p.name),
                    None => println!("{what:<28} {:<34} {:>7} {:>8} {:>11} {:>12}", p.name, p.threads, f(p.gbps, 2), f(p.ratio_total, 2), f(p.ratio_per_thread, 2)),
                }
            }
            println!("{what:<28} {:<34} {:>7} {:>8.2}", "dmabridge (this run)", c.threads, c.gbps);
            if let Some(one) = c.gbps_one_thread {
                println!("{what:<28} {:<34} {:>7} {:>8.2}", "dmabridge on one thread (this run)", 1, one);
            }
        }
    }
    let fused: Vec<(&ConvertResult, BesideLinear)> = report.convert.iter().filter_map(|c| c.beside_linear.map(|b| (c, b))).collect();
    if !fused.is_empty() {
        println!();
        println!("fused tiled -> RGB beside dmabridge's linear conversion of the same formats, taking turns (GB/s of output):");
        println!("{:<36} {:>7} {:>8} {:>8} {:>15}", "conversion", "threads", "fused", "linear", "fused ÷ linear");
        for (c, b) in fused {
            let what = format!("{} {} -> {}", c.format, c.layout, c.to_format);
            println!("{what:<36} {:>7} {:>8.2} {:>8.2} {:>15.3}", b.threads, b.fused_gbps, b.linear_gbps, b.fused_gbps / b.linear_gbps);
            println!("{what:<36} {:>7} {:>8.2} {:>8.2} {:>15.3}", 1, b.fused_gbps_one_thread, b.linear_gbps_one_thread, b.fused_gbps_one_thread / b.linear_gbps_one_thread);
        }
    }
    println!();
    println!("negotiation: {:.1} µs; descriptor handoff: {:.1} µs", report.negotiate_us, report.handoff_us);
    println!();
    // The goals as the report states them (one list, Figures::goals).
    let figures = Figures::from_report(&report);
    if let Ok(f) = &figures {
        println!("goals (measured, goal, met):");
        for (name, value, goal, met) in f.goals() {
            let value = value.map_or("not measured here".to_owned(), |v| format!("{v:.3}"));
            println!("  {name}: {value} ({goal}) {}", if met { "met" } else { "unmet" });
        }
    }

    if let Some(dir) = args.plot.parent().filter(|d| !d.as_os_str().is_empty()) {
        let _ = std::fs::create_dir_all(dir);
    }
    let plotted = figures
        .map_err(|e| e.to_string())
        .and_then(|f| write_plot(&args.plot, &f).map_err(|e| e.to_string()));
    match plotted {
        Ok(()) => {
            println!();
            println!("plot: {}", args.plot.display());
            if let Err(why) = font() {
                println!("(drawn without text: {why})");
            }
        }
        Err(e) => eprintln!("dmabridge bench: {e}"),
    }
    crate::exit_status(engine.adapter())
}
