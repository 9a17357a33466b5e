"""Weave's Python SDK (`weave` from PyPI, unmodified; version pinned by
requirements.txt) against a built flywheel binary:

    python check.py /path/to/flywheel      (FLYWHEEL_DATABASE=postgres://... for PostgreSQL)

It starts `flywheel serve` on a free loopback port with a temporary data dir
and points the SDK at it the way a W&B user points it at a W&B server
(WANDB_BASE_URL and WF_TRACE_SERVER_URL = the server, WANDB_API_KEY = a
flywheel key, HOME a temporary folder). Then, through the SDK's own API:
weave.init("entity/project") (which asks /graphql whether the project
exists), nested @weave.op calls with token usage and a project price
(client.add_cost), weave.publish of an object and of a weave.Dataset,
weave.Evaluation(...).evaluate(model) with two scorers, an EvaluationLogger,
reactions and notes on a call, a call's deletion, spans sent by OpenTelemetry's
OTLP exporter to /otel/v1/traces; and reads everything back
through the SDK (get_calls, ref.get(), call.feedback) and the raw routes
(/call/read with costs and sizes, /table/query, /refs/read_batch,
/feedback/query, /calls/query_stats). Digests are checked against Weave's own
digest code (weave.trace.serialization.digest). Another user's key gets 403.
Any mismatch exits non-zero.
"""

from __future__ import annotations

import asyncio
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from flywheel_server import Checks, Server, watchdog  # noqa: E402

PROJECT = "admin/weave-py"


def main(binary: str) -> int:
    server = Server(binary)
    c = Checks()
    # A hung SDK call fails the check instead of stalling CI.
    timer = watchdog(server, 150)
    try:
        run(server, c)
    except Exception as e:  # the SDK raised: a failure, with the server's log
        import traceback
        traceback.print_exc()
        c.check("the SDK ran without raising", False, repr(e))
    finally:
        timer.cancel()
        if c.failed:
            print("--- the server's log (warnings and errors)\n" + server.tail(), flush=True)
        server.stop()
    print(f"{c.passed} passed, {c.failed} failed", flush=True)
    return 1 if c.failed else 0


def run(server: Server, c: Checks) -> None:
    home = os.path.join(server.dir, "home")  # removed with the server's dir
    os.makedirs(home)
    os.environ.update({
        "HOME": home, "WANDB_API_KEY": server.admin_key, "WANDB_BASE_URL": server.base,
        "WF_TRACE_SERVER_URL": server.base, "WEAVE_PRINT_CALL_LINK": "false",
        # The SDK caches obj_create answers on disk by project and digest (in the system's
        # temp dir by default), across servers: a run against a fresh server would skip
        # writing objects an earlier run wrote elsewhere.
        "WEAVE_SERVER_CACHE_DIR": os.path.join(home, "server-cache"),
    })
    os.environ.pop("WANDB_ENTITY", None)
    import weave
    from weave import Dataset, Evaluation, EvaluationLogger
    from weave.trace.serialization.digest import compute_row_digest, compute_table_digest, compute_object_digest

    bob_key = server.create_key("bob")
    client = weave.init(PROJECT)
    c.check("weave.init(entity/project) against flywheel", client is not None and f"{client.entity}/{client.project}" == PROJECT,
            (client.entity, client.project))

    # --- nested ops with token usage, priced by a project price
    client.add_cost(llm_id="gpt-4", prompt_token_cost=3e-05, completion_token_cost=6e-05)

    @weave.op
    def llm(prompt: str) -> str:
        weave.require_current_call().summary["usage"] = {
            "gpt-4": {"requests": 1, "prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}
        return prompt.upper()

    @weave.op
    def pipeline(x: str) -> str:
        return llm(x) + "!"

    out, root_call = pipeline.call("hé")
    c.check("the ops ran", out == "HÉ!", out)
    client.flush()
    calls = list(client.get_calls(filter={"trace_ids": [root_call.trace_id]}))
    c.check("get_calls: the two nested calls", len(calls) == 2, len(calls))
    child = next((x for x in calls if x.parent_id == root_call.id), None)
    c.check("the child's parent is the root", child is not None, [x.parent_id for x in calls])
    st, read = server.post("/call/read", {"project_id": PROJECT, "id": child.id, "include_costs": True,
                                          "include_storage_size": True})
    call = (read or {}).get("call") or {}
    costs = (call.get("summary", {}).get("platform", {}).get("costs") or {}).get("gpt-4") or {}
    c.check("/call/read: op name is the op's ref", st == 200 and call.get("op_name", "").startswith(f"weave:///{PROJECT}/op/llm:"),
            call.get("op_name"))
    c.check("/call/read: inputs and output", call.get("inputs") == {"prompt": "hé"} and call.get("output") == "HÉ", call)
    c.check("/call/read: costs from the project price",
            costs.get("prompt_tokens") == 10 and costs.get("completion_tokens") == 5 and costs.get("pricing_level") == "project"
            and abs(costs.get("prompt_tokens_total_cost", 0) - 3e-4) < 1e-12
            and abs(costs.get("completion_tokens_total_cost", 0) - 3e-4) < 1e-12, costs)
    st, read = server.post("/call/read", {"project_id": PROJECT, "id": root_call.id, "include_total_storage_size": True})
    root = (read or {}).get("call") or {}
    c.check("/call/read: the root's usage sums its child's",
            (root.get("summary", {}).get("usage") or {}).get("gpt-4", {}).get("prompt_tokens") == 10, root.get("summary"))
    c.check("/call/read: the root's total storage size", isinstance(root.get("total_storage_size_bytes"), int)
            and root["total_storage_size_bytes"] > 0, root.get("total_storage_size_bytes"))

    # --- objects and a dataset
    cfg_val = {"b": 1, "a": [1, "é"], "nested": {"z": True, "y": None}}
    cfg_ref = weave.publish(cfg_val, name="ci-config")
    c.check("weave.publish: the digest Weave computes", cfg_ref.digest == compute_object_digest(cfg_val), cfg_ref.digest)
    c.check("ref.get(): the object back", cfg_ref.get() == cfg_val, cfg_ref.get())
    rows = [{"q": "2+2", "a": 4}, {"q": "3*3", "a": 9}, {"q": "10-7", "a": 3, "tag": "é"}]
    ds_ref = weave.publish(Dataset(name="arith", rows=rows))
    client.flush()  # publish returns once the digest is known (computed client-side); the writes follow
    ds = ds_ref.get()
    c.check("Dataset: rows read back through the SDK", [dict(r) for r in ds.rows] == rows, [dict(r) for r in ds.rows])
    table_ref = ds.rows.table_ref
    row_digests = [compute_row_digest(r) for r in rows]
    c.check("Dataset: the table digest Weave computes", table_ref is not None and table_ref.digest == compute_table_digest(row_digests),
            getattr(table_ref, "digest", None))
    st, tq = server.post("/table/query", {"project_id": PROJECT, "digest": table_ref.digest, "limit": 2, "offset": 1})
    c.check("/table/query: a page of rows with digests and indexes", st == 200 and
            [(r["digest"], r["original_index"], r["val"]) for r in tq["rows"]] == [(row_digests[1], 1, rows[1]), (row_digests[2], 2, rows[2])], tq)
    st, stats = server.post("/table/query_stats", {"project_id": PROJECT, "digest": table_ref.digest})
    c.check("/table/query_stats: 3 rows", st == 200 and stats == {"count": 3}, stats)
    row_ref = f"{ds_ref.uri()}/attr/rows/id/{row_digests[2]}/key/tag"
    st, rb = server.post("/refs/read_batch", {"refs": [ds_ref.uri() + "/attr/name", row_ref]})
    c.check("/refs/read_batch: a dataset attribute and a row's key", st == 200 and rb == {"vals": ["arith", "é"]}, rb)
    st, _ = server.post("/table/query", {"project_id": PROJECT, "digest": table_ref.digest}, key=bob_key)
    c.check("another user's key: 403 on the table", st == 403, st)

    # --- an evaluation with two scorers
    class Calc(weave.Model):
        bias: int = 0

        @weave.op
        def predict(self, q: str) -> int:
            return eval(q) + self.bias  # the dataset's own arithmetic

    @weave.op
    def exact(a: int, output: int) -> dict:
        return {"correct": a == output}

    @weave.op
    def distance(a: int, output: int) -> float:
        return float(abs(a - output))

    evaluation = Evaluation(name="arith-eval", dataset=ds, scorers=[exact, distance])
    summary = asyncio.run(evaluation.evaluate(Calc(bias=1)))
    c.check("Evaluation.evaluate: the scorers' summary", summary.get("exact", {}).get("correct", {}).get("true_count") == 0
            and summary.get("distance", {}).get("mean") == 1.0, summary)
    client.flush()
    evals = list(client.get_calls(filter={"op_names": [f"weave:///{PROJECT}/op/Evaluation.evaluate:*"]}))
    c.check("the evaluation's root call", len(evals) == 1 and evals[0].output == summary, [e.output for e in evals])
    per_example = list(client.get_calls(filter={"parent_ids": [evals[0].id]}))
    pas = [x for x in per_example if "predict_and_score" in x.op_name]
    c.check("one predict_and_score call per row", len(pas) == 3, [x.op_name for x in per_example])
    scores = sorted((x.output or {}).get("scores", {}).get("distance") for x in pas)
    c.check("per-row scorer results", scores == [1.0, 1.0, 1.0], [x.output for x in pas])

    # --- EvaluationLogger
    el = EvaluationLogger(model="calc-v2", dataset="arith-rows")
    for r in rows:
        pred = el.log_prediction(inputs={"q": r["q"]}, output=r["a"])
        pred.log_score("exact", True)
        pred.finish()
    el.log_summary({"note": "all exact"})
    client.flush()
    logged = list(client.get_calls(filter={"op_names": [f"weave:///{PROJECT}/op/Evaluation.evaluate:*"]}))
    c.check("EvaluationLogger: a second evaluation call", len(logged) == 2, len(logged))
    el_root = next((x for x in logged if x.id != evals[0].id), None)
    c.check("EvaluationLogger: the summary with the mean score", el_root is not None and
            (el_root.output or el_root.summary or {}) != {} and
            "exact" in str(el_root.output) + str(el_root.summary), el_root and (el_root.output, el_root.summary))

    # --- feedback on a call
    root_call.feedback.add_reaction("👍")
    root_call.feedback.add_note("looks right")
    client.flush()
    fb = list(client.get_call(root_call.id).feedback)
    c.check("call.feedback: the reaction and the note", sorted(f.feedback_type for f in fb) == ["wandb.note.1", "wandb.reaction.1"],
            [f.feedback_type for f in fb])
    st, fq = server.post("/feedback/query", {"project_id": PROJECT, "query": {"$expr": {"$eq": [
        {"$getField": "weave_ref"}, {"$literal": f"weave:///{PROJECT}/call/{root_call.id}"}]}}})
    c.check("/feedback/query by ref", st == 200 and fq["total_count"] == 2 and
            {f["feedback_type"]: f["payload"] for f in fq["result"]} == {"wandb.reaction.1": {"emoji": "👍"}, "wandb.note.1": {"note": "looks right"}}, fq)
    note = next(f for f in fb if f.feedback_type == "wandb.note.1")
    client.get_call(root_call.id).feedback.purge(note.id)
    c.check("feedback purge", [f.feedback_type for f in client.get_call(root_call.id).feedback] == ["wandb.reaction.1"],
            [f.feedback_type for f in client.get_call(root_call.id).feedback])

    # --- deletion: soft, honoured by every read
    st, before = server.post("/calls/query_stats", {"project_id": PROJECT})
    client.delete_call(client.get_call(root_call.id))
    st, after = server.post("/calls/query_stats", {"project_id": PROJECT})
    c.check("delete_call: the call and its child leave the counts", after["count"] == before["count"] - 2, (before, after))
    st, gone = server.post("/call/read", {"project_id": PROJECT, "id": root_call.id})
    c.check("/call/read of a deleted call: null", st == 200 and gone == {"call": None}, gone)
    client.delete_object_version(cfg_ref)
    st, _ = server.post("/obj/read", {"project_id": PROJECT, "object_id": "ci-config", "digest": cfg_ref.digest})
    c.check("delete_object_version: the object reads 404", st == 404, st)

    # --- OTLP export: OpenTelemetry's own exporter (a dependency of weave) sends spans, stored as calls
    import base64
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    auth = base64.b64encode(f"api:{server.admin_key}".encode()).decode()
    provider = TracerProvider(resource=Resource.create({"service.name": "weave-python-check"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(
        endpoint=server.base + "/otel/v1/traces", headers={"Authorization": f"Basic {auth}", "project_id": PROJECT})))
    tracer = provider.get_tracer("check")
    with tracer.start_as_current_span("agent", attributes={"model": "gpt-4", "turns": 2}) as outer:
        with tracer.start_as_current_span("tool"):
            pass
    provider.shutdown()
    trace_hex = format(outer.get_span_context().trace_id, "032x")
    st, spans = server.post("/calls/query", {"project_id": PROJECT, "filter": {"trace_ids": [trace_hex]}})
    got = sorted((x["op_name"], x["parent_id"] is None, x["attributes"].get("model"),
                  x["attributes"].get("otel.resource", {}).get("service.name")) for x in (spans or {}).get("calls", []))
    c.check("/otel/v1/traces: OTLP spans stored as calls", st == 200 and got == [
        ("agent", True, "gpt-4", "weave-python-check"), ("tool", False, None, "weave-python-check")], got)


if __name__ == "__main__":
    if len(sys.argv) != 2 or not os.path.exists(sys.argv[1]):
        print("usage: check.py /path/to/flywheel", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
