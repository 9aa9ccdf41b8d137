"""Generate docs/results.md from the files that hold measured figures: goldens/regressions.yaml
(the expected metrics, with tolerances) and benchmarks/results/*.json (what each benchmark script
last measured). A figure lives in those files only; this page is rebuilt from them on every docs
build (docs/hooks.py), so it cannot drift from them.

    .venv/bin/python docs/gen_results.py      # writes docs/results.md
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "results.md"
MAX_ROWS = 80  # per benchmark: the rest is in its file


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1e5 else f"{value:,.0f}"
    if isinstance(value, (list, tuple)) and all(not isinstance(v, (dict, list)) for v in value):
        return ", ".join(_fmt(v) for v in value) if len(value) <= 12 else f"{len(value)} values"
    return str(value).replace("|", "\\|").replace("\n", " ")


def _leaves(data: Any, prefix: str = "") -> list[tuple[str, str]]:
    """Every scalar of a JSON document as (dotted path, value); a list of records is counted."""
    if isinstance(data, dict):
        out = []
        for key, value in data.items():
            out += _leaves(value, f"{prefix}.{key}" if prefix else str(key))
        return out
    if isinstance(data, list) and data and isinstance(data[0], dict):
        return [(prefix, f"{len(data)} records (in the file)")]
    return [(prefix, _fmt(data))]


def regressions() -> list[str]:
    doc = yaml.safe_load((ROOT / "goldens" / "regressions.yaml").read_text(encoding="utf-8"))
    lines = ["## Regression conditions", "",
             "`lab eval --check goldens/regressions.yaml` runs each; OK within `tolerance` below the expected "
             "value (or better), OKISH within `okish`, else FAIL.", "",
             "| condition | dataset | preset | expected | tolerance / okish |", "|---|---|---|---|---|"]
    for c in doc["conditions"]:
        expected = ", ".join(f"{k} {v}" for k, v in c["expected"].items())
        extra = [f"{k}: {c[k]}" for k in ("context_turns", "observations", "credit_derived") if k in c]
        name = c["name"] + (f" ({'; '.join(extra)})" if extra else "")
        lines.append(f"| {name} | {c['dataset']} | {c['preset']} | {expected} | "
                     f"{c.get('tolerance', 0.005)} / {c.get('okish', 0.02)} |")
    return lines + [""]


def benchmark(path: Path) -> list[str]:
    data = json.loads(path.read_text(encoding="utf-8"))
    title = data.get("benchmark", path.stem) if isinstance(data, dict) else path.stem
    where = f"`benchmarks/results/{path.name}`"
    if isinstance(data, dict) and "machine" in data:
        where += f", measured on {data['machine']}"
    script = next((s for s in (f"benchmarks/{path.stem}.py", f"benchmarks/{path.stem}/run.py")
                   if (ROOT / s).is_file()), None)
    if script:
        where += f"; written by `{script}`"
    lines = [f"## {title}", "", where, ""]
    if path.stem == "models" and isinstance(data, dict):
        return lines + models_tables(data)
    if path.stem == "systems" and isinstance(data, dict):
        return lines + systems_tables(data)
    if path.stem == "vector_recall" and isinstance(data, dict):
        return lines + vector_recall_table(data)
    if path.stem == "many_namespaces" and isinstance(data, dict) and "library" in data:
        return lines + many_namespaces_tables(data)
    if path.stem == "scale_store" and isinstance(data, dict) and "growth" in data:
        return lines + scale_store_table(data)
    if path.stem == "model_servers" and isinstance(data, dict) and "onnx_int8" in data:
        return lines + model_servers_table(data)
    if path.stem == "adapt_cv" and isinstance(data, dict) and "datasets" in data:
        return lines + adapt_cv_tables(data)
    if path.stem.startswith("finetune_cv") and isinstance(data, dict) and "settings" in data:
        return lines + finetune_cv_tables(data)
    if path.stem == "longmemeval_s" and isinstance(data, dict):
        return lines + longmemeval_s_tables(data)
    if path.stem.startswith("default_cv") and isinstance(data, dict) and "levers" in data:
        return lines + default_cv_tables(data)
    rows = [(k, v) for k, v in _leaves(data) if k not in ("benchmark", "machine")]
    lines += ["| measure | value |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in rows[:MAX_ROWS]]
    if len(rows) > MAX_ROWS:
        lines.append(f"| ... | {len(rows) - MAX_ROWS} more in the file |")
    return lines + [""]


def models_tables(data: dict[str, Any]) -> list[str]:
    """benchmarks/models.py's figures as tables a person reads: quality per dataset and encoding,
    then speed and size per model (the rest, per category and per conversation, is in the file)."""
    lines: list[str] = []
    for dataset, rows in data.get("quality", {}).items():
        lines += [f"**{dataset}** (`lab` preset as it is; `vector`: dense retrieval alone)", "",
                  "| encoding | lab recall@10 [95% CI] | lab nDCG@10 | change vs minilm (p) | vector recall@10 | vector nDCG@10 |",
                  "|---|---|---|---|---|---|"]
        for name, row in rows.items():
            lab, vec = row.get("lab", {}), row.get("vector", {})
            ci = lab.get("ci95", {}).get("recall@10")
            ci_text = f" [{ci[0]:.4f}, {ci[1]:.4f}]" if ci else ""
            versus = row.get("lab_vs_minilm", {}).get("recall@10")
            versus_text = f"{versus['delta']:+.4f} ({versus['p']:.3g})" if versus else ""
            lines.append(f"| {name} | {lab.get('recall@10', float('nan')):.4f}{ci_text} | {lab.get('ndcg@10', float('nan')):.4f} "
                         f"| {versus_text} | {vec.get('recall@10', float('nan')):.4f} | {vec.get('ndcg@10', float('nan')):.4f} |")
        lines.append("")
    speed = data.get("speed", {})
    if speed:
        lines += ["| model | passages/s, short (2 threads) | passages/s, at its token limit | one query, p50 / p99 ms (1 thread) | model MB |",
                  "|---|---|---|---|---|"]
        for name, row in speed.items():
            q = row.get("query_ms_one_thread", {})
            lines.append(f"| {name} | {row.get('passages_per_s_short')} | {row.get('passages_per_s_long')} | "
                         f"{q.get('p50_ms')} / {q.get('p99_ms')} | {row.get('model_mb')} |")
        lines.append("")
    cosine = data.get("int8_cosine_to_torch")
    if cosine:
        lines += [f"int8 ONNX vectors against torch's on {cosine['texts']} texts: cosine min {cosine['min']}, "
                  f"mean {cosine['mean']}.", ""]
    tuned = [(name, row["lab_loco"]) for name, row in data.get("quality", {}).get("locomo", {}).items()
             if "lab_loco" in row]
    if tuned:
        lines += ["LoCoMo dev, the extra encoders' weight chosen on nine conversations and measured on the tenth:", "",
                  "| encoding | held-out recall@10 | held-out nDCG@10 | p vs minilm | gains in every conversation |",
                  "|---|---|---|---|---|"]
        for name, cv in tuned:
            gains = sum(d > 0 for d in cv["recall@10_change_by_conversation"].values())
            lines.append(f"| {name} | {cv['held_out_recall@10']:.4f} | {cv['held_out_ndcg@10']:.4f} | "
                         f"{cv['recall@10_vs_minilm_p']:.3g} | {'yes' if cv['gains_every_conversation'] else 'no'} "
                         f"({gains} of {len(cv['recall@10_change_by_conversation'])}) |")
        lines.append("")
    wins = data.get("wins_every_conversation") or {}
    if wins:
        lines += ["| LoCoMo dev, `lab` preset | recall@10 gains in every conversation |", "|---|---|"]
        lines += [f"| {name} | {'yes' if w['every'] else 'no'} "
                  f"({sum(d > 0 for d in w['deltas'].values())} of {len(w['deltas'])}) |" for name, w in wins.items()]
        lines.append("")
    return lines


def systems_tables(data: dict[str, Any]) -> list[str]:
    """benchmarks/systems.py's figures: systems x datasets with CIs, the paired change against lab,
    speed and the round trip; then recall by category, txtai's knob and published claims."""
    lines = [data.get("note", ""), ""]
    for dataset, rows in data.get("results", {}).items():
        lines += [f"**{dataset}**", "",
                  "| system | as | recall@10 [95% CI] | nDCG@10 [95% CI] | vs lab recall@10 (p) | ingest memories/s | "
                  "search p50 / p99 ms | new memory found by the next search |",
                  "|---|---|---|---|---|---|---|---|"]
        for name, e in rows.items():
            r_ci, n_ci = e["ci95"]["recall@10"], e["ci95"]["ndcg@10"]
            versus = (e.get("vs_lab") or {}).get("recall@10")
            versus_text = f"{versus['delta']:+.4f} ({versus['p']:.3g})" if versus else ""
            trip = e.get("round_trip") or {}
            found = ("yes" if trip.get("next_search") else f"after {trip['delay_ms']} ms" if trip.get("found") else "no")
            speed = e["speed"]
            lines.append(f"| {name} | {e.get('as', '')} | {e['recall@10']:.4f} [{r_ci[0]:.4f}, {r_ci[1]:.4f}] | "
                         f"{e['ndcg@10']:.4f} [{n_ci[0]:.4f}, {n_ci[1]:.4f}] | "
                         f"{versus_text} | "
                         f"{speed['ingest']['memories_per_s']} | {speed['search']['p50_ms']} / {speed['search']['p99_ms']} | "
                         f"{found} |")
        lines.append("")
        cats = sorted({c for e in rows.values() for c in e.get("recall@10_by_category", {})})
        if len(cats) > 1:
            lines += ["| system | " + " | ".join(f"recall@10 {c}" for c in cats) + " |",
                      "|---" * (len(cats) + 1) + "|"]
            for name, e in rows.items():
                by = e.get("recall@10_by_category", {})
                lines.append(f"| {name} | " + " | ".join(f"{by[c]:.4f}" if c in by else "" for c in cats) + " |")
            lines.append("")
        for name, e in rows.items():
            approx = (e.get("system") or {}).get("approximates")
            if approx:
                lines.append(f"- {name} approximates: {approx}")
            knob = e.get("knob")
            if knob:
                lines.append(f"- {name} at its knob's best (hybrid weight {knob['best_weight']}, chosen on "
                             f"{knob['chosen_on']}): validation recall@10 {knob['validation_recall@10_best']:.4f}, "
                             f"against {knob['validation_recall@10_default']:.4f} at its default, on the same "
                             f"{knob['validation_questions']} validation questions")
            claim = e.get("published")
            if claim:
                lines.append(f"- {name}, published: nDCG@10 {claim['ndcg@10']} ({claim['claim']}); measured here "
                             f"{e['ndcg@10']:.4f}")
        lines.append("")
    return lines


def default_cv_tables(data: dict[str, Any]) -> list[str]:
    """The nested selection of the default: the outer-fold estimate per dataset, then each lever:
    in how many folds it was chosen, its held-out gain per dataset and whether it entered."""
    names = list(data["datasets"])
    lines = ([data["note"], ""] if data.get("note") else []) + [f"Default found: `{data['default']}`", "",
             "| dataset | questions | outer-fold recall@10 | nDCG@10 | recall@10 per fold (min-max) | vs RRF k 2 (recall@10) "
             "| vs RRF k 2 (nDCG@10) | adjacency lift |",
             "|---|---|---|---|---|---|---|---|"]
    for name, d in data["datasets"].items():
        spread, vs = d["outer_fold_recall@10_spread"], d["outer_fold_vs_rrf_k2"]
        lift = (d.get("adjacency_evidence") or {}).get("lift", "-")
        cells = " | ".join(f"{vs[m]['delta']:+} [{vs[m]['ci95'][0]}, {vs[m]['ci95'][1]}]" for m in ("recall@10", "ndcg@10"))
        lines.append(f"| {name} | {d['questions']} | {d['outer_fold']['recall@10']} | {d['outer_fold']['ndcg@10']} | "
                     f"{spread['min']}-{spread['max']} | {cells} | {lift} |")
    lines += ["", "Adjacency lift: the mean cosine of adjacent memories (consecutive turns of an episode) minus that of "
              "random pairs of their namespace (plain-text vectors); `-` where memories have no episodes."]
    lines += ["", "| lever | chosen in folds | setting | " + " | ".join(f"gain on {n} (recall@10; nDCG@10)" for n in names)
              + " | enters |", "|---" * (len(names) + 4) + "|"]
    for lever, e in data["levers"].items():
        gains = [f"{e['gain'][n]['recall@10']['delta']:+}; {e['gain'][n]['ndcg@10']['delta']:+}" for n in names]
        lines.append(f"| {lever} | {e['chosen_in_folds']} | {e['setting']} | " + " | ".join(gains)
                     + f" | {'yes' if e['enters'] else 'no'} |")
    return lines + [""]


def _ci(cell: list[float]) -> str:
    return f"{cell[0]:.4f} [{cell[1]:.3f}, {cell[2]:.3f}]"


def longmemeval_s_tables(data: dict[str, Any]) -> list[str]:
    """LongMemEval-S dev: the published anchors beside lab's figures, the costs per granularity,
    the official headline per preset and granularity, per question type, and abstention."""
    levels = [g for g in ("session", "turn") if g in data]
    lines = [f"Dataset `{data['dataset']}`, store model `{data['model']}`, user-turn corpus (the official protocol); "
             f"{data['conditions']}. Figures are means with a 95% bootstrap interval over the scored questions.", ""]
    if "session" in data:
        presets = data["session"]["presets"]
        bm25, vector = presets["bm25"], presets["vector"]
        pref = bm25["by_type"].get("single-session-preference", {}).get("session", {})
        anchors = data["anchors"]
        lines += ["| published anchor (LongMemEval-S) | published | lab, session granularity, dev half |", "|---|---|---|",
                  f"| BM25 session recall@5 | {_fmt(anchors['bm25 session recall@5'])} | recall_any@5 "
                  f"{_ci(bm25['all']['session']['recall_any@5'])}; recall_all@5 {_ci(bm25['all']['session']['recall_all@5'])} |",
                  f"| BM25 on preference questions | {anchors['bm25 session recall@5 on preference questions']} | "
                  + (f"recall_all@5 {_ci(pref['recall_all@5'])}" if pref else "-") + " |",
                  f"| all-MiniLM-L6-v2 recall_any@5 | {anchors['all-MiniLM-L6-v2 raw sessions recall_any@5']} | "
                  f"{_ci(vector['all']['session']['recall_any@5'])} (`vector`) |",
                  f"| all-MiniLM-L6-v2 recall_all@5 | {anchors['all-MiniLM-L6-v2 raw sessions recall_all@5']} | "
                  f"{_ci(vector['all']['session']['recall_all@5'])} (`vector`) |", ""]
    for level in levels:
        part = data[level]
        lines += [f"### {level} granularity", "", "| run | wall | peak RSS | texts embedded | embedding texts/s |",
                  "|---|---|---|---|---|"]
        for run in ("cold", "warm", "all"):
            if run in part:
                r = part[run]
                lines.append(f"| {run} | {r['wall_s'] / 60:.1f} min | {r['peak_rss_gb']:.2f} GB | "
                             f"{r.get('texts_embedded', '')} | {part.get('embedding_texts_per_s', '') if run == 'cold' else ''} |")
        if "cold_equals_warm" in part:
            lines += ["", f"Cold and warm runs give the same run files: {'yes' if part['cold_equals_warm'] else 'NO'}."]
        names = [(lv, n) for lv in ("session", "turn") for n in next(iter(part["presets"].values()))["all"].get(lv, {})]
        lines += ["", "| preset | n | " + " | ".join(f"{lv} {n}" for lv, n in names) + " | lab recall@10 |",
                  "|---|---|" + "---|" * (len(names) + 1)]
        for preset, p in part["presets"].items():
            lines.append(f"| {preset} | {p['questions_scored']} | " + " | ".join(_ci(p["all"][lv][n]) for lv, n in names)
                         + f" | {_ci(p['lab_recall@10'])} |")
        types = list(next(iter(part["presets"].values()))["by_type"])
        lines += ["", f"Session recall_all@5 by question type ({level} granularity):", "",
                  "| preset | " + " | ".join(f"{t} (n {part['presets']['lab']['by_type'][t]['n']})" for t in types) + " |",
                  "|---|" + "---|" * len(types)]
        for preset, p in part["presets"].items():
            lines.append(f"| {preset} | " + " | ".join(_ci(p["by_type"][t]["session"]["recall_all@5"]) for t in types) + " |")
        levers = part.get("levers")
        if levers:
            ltypes = list(levers["lab"]["by_type"])
            lines += ["", f"`lab` with one lever off ({level} granularity): session recall_all@5, overall and by type"
                      + (", and turn ndcg_any@10" if level == "turn" else "") + ":", "",
                      "| variant | all | " + " | ".join(ltypes) + (" | turn ndcg_any@10 |" if level == "turn" else " |"),
                      "|---|---|" + "---|" * (len(ltypes) + (level == "turn"))]
            for name, row in levers.items():
                lines.append(f"| {name} | {row['session recall_all@5']:.4f} | "
                             + " | ".join(f"{row['by_type'][t]:.4f}" for t in ltypes)
                             + (f" | {row['turn ndcg_any@10']:.4f} |" if level == "turn" else " |"))
        a = part.get("abstention")
        if a:
            lo = a["locomo_dev_threshold"]
            lines += ["", f"Abstention under `{a['preset']}`: {a['unanswerable']} `_abs` questions against {a['answerable']} "
                          f"answerable; AUROC of the best cosine {_ci(a['auroc'])}. LoCoMo dev's threshold "
                          f"{lo['threshold']} here: precision {lo['precision']}, recall {lo['recall']}, "
                          f"recall@10 cost {lo['cost']}. {a['note']}.", ""]
    return lines + [""]


def vector_recall_table(data: dict[str, Any]) -> list[str]:
    """The hnswlib index against exact search: recall@10 and latency per size and search ef."""
    lines = [f"Real vectors from `{data['source']}` ({data['real_vectors']:,}; {data['queries']} held out as queries; "
             f"larger sizes by copies at distance {data['noise']}); {data['conditions']}.", "",
             "| vectors | build | graphs | M / ef_construction | search ef | recall@10 | p50 | p99 |",
             "|---|---|---|---|---|---|---|---|"]
    for size in data["sizes"]:
        for ef, row in size["by_ef"].items():
            declared = " (declared)" if int(ef) == size["declared_ef_search"] else ""
            lines.append(f"| {size['vectors']:,} | {size['build_s']} s | {size.get('graphs', 1)} | "
                         f"{size['m']} / {size['ef_construction']} | "
                         f"{ef}{declared} | {row['recall@10']:.4f} | {row['p50_ms']:.3f} ms | {row['p99_ms']:.3f} ms |")
    return lines + [""]


def many_namespaces_tables(data: dict[str, Any]) -> list[str]:
    """Many small namespaces: the store's shape, listing, cold and warm search, saves, and a
    server's memory per cap on open namespaces as namespaces are touched."""
    ms = lambda p: f"{p['p50_ms']:.1f} / {p['p99_ms']:.1f} ms (n {p['n']})"  # noqa: E731
    lib, build = data["library"], data["build"]
    lines = [f"{data['namespaces']:,} namespaces x {data['memories_per_namespace']} memories; load average at start "
             f"{data['load_average_at_start']}.", "", "| measure | figure |", "|---|---|",
             f"| ingest | {build['ingest_s']} s ({build['ingest_memories_per_s']:,} memories/s) |",
             f"| writer close (every namespace's index built and saved) | {build['close_with_snapshots_s']} s |",
             f"| store shape | {data['shape']['files']:,} files, {data['shape']['folders']:,} folders, "
             f"{data['shape']['gb']} GB |"]
    if "shape_after_compact" in data:
        after = data["shape_after_compact"]
        lines.append(f"| after `lab store compact` ({data['compact']['seconds']} s) | {after['files']:,} files, "
                     f"{after['folders']:,} folders, {after['gb']} GB |")
    lines += [f"| `lab stats` (a process: start-up included) | {data['lab_stats']['seconds']} s |",
              f"| namespace listing in the library | {lib['namespaces_listing_s'] * 1000:.1f} ms |",
              f"| first search in a namespace (cold), p50 / p99 | {ms(lib['cold_first_search'])} |",
              f"| warm search, p50 / p99 | {ms(lib['warm_search'])} |"]
    if "saves" in data:
        lines += [f"| single save, p50 / p99 | {ms(data['saves']['single_save'])} |",
                  f"| search right after a save, p50 / p99 | {ms(data['saves']['search_right_after_a_save'])} |"]
    lines.append("")
    for run in data.get("served", []):
        rss = ", ".join(f"{s['touched']:,}: {s['rss_gb']} GB" for s in run["rss_by_touched"])
        lines += [f"Server with `LAB_OPEN_NAMESPACES={run['open_namespaces']}`: one search in each of "
                  f"{run['touched']:,} namespaces (first search each {ms(run['first_search_each'])}, "
                  f"{run['errors']} errors); resident memory by namespaces touched: {rss}.", ""]
    return lines


SCALE_ROWS = (  # label, path in a size's results, unit
    ("ingest", ("build", "ingest_s"), "s"), ("index build", ("build", "index_build_s"), "s"),
    ("build peak RSS", ("build", "peak_rss_gb"), "GB"), ("`lab store check`", ("check", "seconds"), "s"),
    ("open and load (library)", ("library", "open_and_load_s"), "s"),
    ("vector search p50", ("library", "search_vector", "p50_ms"), "ms"),
    ("vector search p99", ("library", "search_vector", "p99_ms"), "ms"),
    ("bm25 search p50", ("library", "search_bm25", "p50_ms"), "ms"),
    ("bm25 search p99", ("library", "search_bm25", "p99_ms"), "ms"),
    ("lab search p50", ("library", "search_lab", "p50_ms"), "ms"),
    ("lab search p99", ("library", "search_lab", "p99_ms"), "ms"),
    ("library peak RSS", ("library", "peak_rss_gb"), "GB"),
    ("server start to ready", ("served", "start_to_ready_s"), "s"),
    ("served search paced, answered per s", ("served", "search_paced", "answered_per_s"), "/s"),
    ("served search paced p50", ("served", "search_paced", "p50_ms"), "ms"),
    ("served search paced p99", ("served", "search_paced", "p99_ms"), "ms"),
    ("server peak RSS", ("served", "server_peak_rss_gb"), "GB"),
    ("single save p50", ("saves", "single_save", "p50_ms"), "ms"),
    ("single save p99", ("saves", "single_save", "p99_ms"), "ms"),
    ("search right after a save p50", ("saves", "lab_search_right_after_a_save", "p50_ms"), "ms"),
    ("search right after a save p99", ("saves", "lab_search_right_after_a_save", "p99_ms"), "ms"),
    ("`lab store compact`", ("compact", "seconds"), "s"),
)


def scale_store_table(data: dict[str, Any]) -> list[str]:
    """One namespace grown 10k -> 100k -> 1M: every figure per size, and its growth per tenfold."""
    sizes = data["sizes"]

    def at(size: int, path: tuple) -> Any:
        node: Any = data.get(f"memories_{size}", {})
        for key in path:
            node = node.get(key) if isinstance(node, dict) else None
        return node

    head = " | ".join(f"{s:,}" for s in sizes)
    grow = " | ".join(f"x{sizes[i + 1] // sizes[i]}" for i in range(len(sizes) - 1))
    lines = [f"Vectors: {data['vectors']}. Served: `lab serve`, searches offered at {data['served_rate_per_s']}/s; "
             f"load average at start {data['load_average_at_start']}.", "",
             f"| measure | {head} | {grow} |", "|---|" + "---|" * (2 * len(sizes) - 1)]
    for label, path, unit in SCALE_ROWS:
        values = [at(s, path) for s in sizes]
        ratios = [f"{b / a:.2f}" if isinstance(a, (int, float)) and isinstance(b, (int, float)) and a else "-"
                  for a, b in zip(values, values[1:])]
        cells = [f"{v:g} {unit}" if isinstance(v, (int, float)) else "-" for v in values]
        lines.append(f"| {label} | {' | '.join(cells)} | {' | '.join(ratios)} |")
    return lines + [""]


def model_servers_table(data: dict[str, Any]) -> list[str]:
    """all-MiniLM-L6-v2 through infinity and in process, and lab's paths against plain loops."""
    lines = [f"{data['texts']:,} texts ({data['tokens']:,} tokens) of {data['source']}; the fastest of {data['rounds']} "
             f"alternating rounds; load average at start {data['load_average_at_start']}.", "",
             "| path | texts/s | tokens/s | against |", "|---|---|---|---|"]
    for kind, name in (("sentence_transformers", "sentence-transformers"), ("onnx_int8", "int8 ONNX")):
        row = data[kind]
        lines += [f"| lab, {name} | {row['lab']['texts_per_s']:,} | {row['lab']['tokens_per_s']:,} | "
                  f"{row['lab_vs_plain']:.3f} x the plain loop |",
                  f"| plain {name} loop | {row['plain_loop']['texts_per_s']:,} | {row['plain_loop']['tokens_per_s']:,} | |"]
    for name, row in data.get("through_infinity", {}).items():
        lines.append(f"| lab, {name.replace('_', ' ')} (infinity run) | {row['texts_per_s']:,} | {row['tokens_per_s']:,} | |")
    if "server_vs_in_process_max_abs_diff" in data:
        lines += ["", f"Largest difference between the server's vectors and the in-process model's: "
                      f"{data['server_vs_in_process_max_abs_diff']:.2e}."]
    return lines + [""]


def finetune_cv_tables(data: dict[str, Any]) -> list[str]:
    """The fine-tuned model on held-out folds: base against fine-tuned, alone and in `lab`, per dataset."""
    st = data["settings"]
    epochs = (f"{st['epochs']} epoch(s)" if st.get("epochs") else
              f"epochs chosen per fold among {', '.join(map(str, st['epochs_on_train']))} on its training folds")
    lines = [f"Held-out folds as `adapt_cv` draws them (LoCoMo: one conversation; LongMemEval dev: hash groups of "
             f"haystacks; SciFact: hash groups of questions); {epochs}, batch {st['batch_size']}, "
             f"learning rate {st['learning_rate']}, {st['hard_negatives']} in-namespace hard negative(s). Paired over "
             "every held-out question.", "",
             "| dataset | preset | metric | base | fine-tuned | delta [95% CI] | p |", "|---|---|---|---|---|---|---|"]
    datasets = data.get("datasets", {})
    for name, d in datasets.items():
        for preset, label in (("vector", "vector"), ("lab", "lab"),
                              ("lab_fusion_on_train", "lab, vector weight chosen on the training folds")):
            for metric, r in (d.get(preset) or {}).items():
                lines.append(f"| {name} | {label} | {metric} | {r['mean_a']:.4f} | {r['mean_b']:.4f} | {r['delta']:+.4f} "
                             f"[{r['delta_low']:+.4f}, {r['delta_high']:+.4f}] | {r['p_value']:.4f} |")
    chosen = {name: [(f["fold"], f["vector_factor_on_train"]["chosen"]) for f in d.get("folds", [])
                     if "vector_factor_on_train" in f] for name, d in datasets.items()}
    if any(chosen.values()):
        lines += ["", "`lab, vector weight chosen on the training folds`: each fold's model also embedded the training "
                      "folds' memories, and `lab`'s vector lists were weighted by the factor the training questions "
                      "preferred (base: `lab` on the base model's store). Chosen per fold: " +
                  "; ".join(f"{name} " + ", ".join(f"{fold} x{factor:g}" for fold, factor in got)
                            for name, got in chosen.items() if got) + "."]
    picked = {name: [f for f in d.get("folds", []) if "epochs_on_train" in f] for name, d in datasets.items()}
    if any(picked.values()):
        lines += ["", "Epochs chosen on the training folds: one training fold validated, the others trained a model "
                      "per count, and the count giving `lab` the best mean of recall@10 and nDCG@10 on the validation "
                      "questions trained the fold's model. Per fold, the validation figure of each count:", "",
                  "| dataset | held out | validated on | " + " | ".join(
                      f"{e} epoch(s)" for e in st["epochs_on_train"]) + " | chosen |",
                  "|---|---|---|" + "---|" * (len(st["epochs_on_train"]) + 1)]
        for name, folds in picked.items():
            for f in folds:
                e = f["epochs_on_train"]
                lines.append(f"| {name} | {f['fold']} | {e['validation_fold']} ({e['validation_questions']} questions) | " +
                             " | ".join(f"{e['lab_mean_recall_ndcg@10'][str(n)]:.4f}" for n in st["epochs_on_train"]) +
                             f" | {e['chosen']} |")
    lines += ["", "| dataset | held out | questions | memories embedded again | triplets | held-out gold left out as "
                  "positive | train | store built again | vector recall@10 (base -> tuned) |",
              "|---|---|---|---|---|---|---|---|---|"]
    for name, d in datasets.items():
        for f in d.get("folds", []):
            lines.append(f"| {name} | {f['fold']} | {f['questions']} | {f.get('memories', 'all')} | {f['triplets']} | "
                         f"{f.get('positives_left_out', 'not checked')} | {f['train_s']} s | {f['embed_s']} s | "
                         f"{f['vector_recall@10'][0]:.4f} -> {f['vector_recall@10'][1]:.4f} |")
    checked = {name: d["narrowed_equals_whole"] for name, d in datasets.items() if "narrowed_equals_whole" in d}
    if checked:
        lines += ["", "A fold's store held its held-out namespaces only; the base model's store narrowed alike scored "
                      "the first fold's questions as the whole store does: " +
                      ", ".join(f"{name} {'yes' if same else 'NO'}" for name, same in checked.items()) + "."]
    for name, d in datasets.items():
        if "official_targets" not in d:
            continue
        lines += ["", f"{name}: the official metrics of the issue's targets. The best baseline of every preset but `lab` "
                      "on the base model's store, and `lab` paired against it, with the base model and fine-tuned "
                      "(held-out folds):", "",
                  "| metric | best baseline | its mean | `lab` | mean | delta [95% CI] | p |", "|---|---|---|---|---|---|---|"]
        for metric, t in d["official_targets"].items():
            for what, label in (("lab_base", "base model"), ("lab_finetuned", "fine-tuned")):
                r = t[what]
                lines.append(f"| {metric} | {t['best_baseline']} | {r['mean_a']:.4f} | {label} | {r['mean_b']:.4f} | "
                             f"{r['delta']:+.4f} [{r['delta_low']:+.4f}, {r['delta_high']:+.4f}] | {r['p_value']:.4f} |")
    for name, d in datasets.items():
        if "timed" in d:
            t = d["timed"]
            lines += ["", f"Trained on all of {name}'s gold in {t['train_on_all_s']} s and every memory embedded again "
                          f"in {t['re_embed_s']} s: {t['total_min']} min (load average {d['load_average_at_start']:.1f} "
                          f"at the start, {d.get('load_average_at_end', 0):.1f} at the end)."]
    return lines + [""]


def adapt_cv_tables(data: dict[str, Any]) -> list[str]:
    """Query adapters on held-out folds: the base model against the adapted queries, alone and in `lab`."""
    lines = [f"The penalty chosen inside each fold from {data['l2_grid']}; otherwise {data['settings']['kind']} "
             f"rank {data['settings']['rank']}, {data['settings']['steps']} steps. Paired over every held-out "
             "question: delta, 95% bootstrap CI, randomization p.", "",
             "`positives left out`: per fold, the training pairs whose memory's text is a held-out question's gold "
             "(not seen by that fold's training); `not checked`: measured before that guard.", "",
             "| dataset | questions | list | metric | base | adapted | delta [95% CI] | p | l2 chosen | "
             "positives left out | train on all |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, d in data["datasets"].items():
        chosen = ", ".join(sorted({str(f["l2"]) for f in d["folds"]}))
        left = ", ".join(str(f.get("positives_left_out", "not checked")) for f in d["folds"])
        for what, label in (("vector_only", "vector only"), ("lab", "`lab` fused")):
            for metric, r in d[what].items():
                lines.append(f"| {name} | {r['n']} | {label} | {metric} | {r['mean_a']:.4f} | {r['mean_b']:.4f} | "
                             f"{r['delta']:+.4f} [{r['delta_low']:+.4f}, {r['delta_high']:+.4f}] | {r['p_value']:.4f} | "
                             f"{chosen} | {left} | {d['train_on_all_s']} s |")
    return lines + [""]


def render() -> str:
    lines = ["# Results", "",
             "Generated by `docs/gen_results.py` from `goldens/regressions.yaml` and `benchmarks/results/*.json` "
             "on every docs build: a measured figure lives in those files only. Each section names the file "
             "and the script that writes it; run the script to measure again.", ""]
    lines += regressions()
    for path in sorted((ROOT / "benchmarks" / "results").glob("*.json")):
        lines += benchmark(path)
    return "\n".join(lines).rstrip() + "\n"


def main() -> int:
    OUT.write_text(render(), encoding="utf-8")
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
