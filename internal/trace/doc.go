// Package trace is the call store: recorded calls (traced operation
// invocations) grouped in projects "entity/project", their storage sizes and
// token costs, and the objects and files the Weave SDKs save with them,
// served under /call/*, /calls/*, /cost/*, /obj/*, /objs/* and /file/* as the
// contract in shared/design/trace.md describes.
//
// # Wiring
//
//	svc, err := trace.New(db, trace.Options{PricesFile: ..., DefaultServicePrice: &trace.TokenPrice{...}})
//	svc.Register(rt)  // httpx.CallStore: POST /call/read, /call/start, /call/end, /call/upsert_batch, /call/update,
//	                  // /calls/delete, /calls/query, /calls/stream_query, /cost/create, /cost/query, /cost/purge,
//	                  // /obj/create, /obj/read, /objs/query, /file/create, /file/content; httpx.Public: GET /health, /server_info
//	id, err := svc.RecordCall(ctx, principal, "entity/project", "chat.completions", t0, t1, inputs, output, summary, "")
//	err = svc.SetDefaultPrice(ctx, "gpt-4", 3e-05, 6e-05, time.Time{}) // `flywheel prices` (cmd/flywheel) runs on these
//
// New applies the package's own migrations (embedded SQL files per dialect,
// recorded in trace_schema_migrations) to the shared database, SQLite or
// PostgreSQL (Options.Dialect; see dialect.go and docs/call-store.md); its tables are
// trace_projects, trace_calls, trace_prices, trace_objects and trace_files. Routes are
// mounted in the httpx.CallStore group through httpx's handler adapter;
// handlers take the caller from httpx.Principal (401 without one) and the
// body from httpx.ReadBody, under the server's one body limit (413 above
// it); a project of an entity the caller is not a member of is 403;
// projects are created on the first write. Errors are {"reason": "..."}
// with 400, 401, 403, 413 or 500 (never Go internals).
//
// # Storage
//
// One row per call in trace_calls, unique on (project, id), indexed by trace
// (covering the two size columns, so a root's total storage size is an
// index-only sum), by parent, and by (project, started_at, id) for the default
// query order. Times are Unix microseconds; responses write RFC 3339 UTC with
// six fractional digits.
//
// JSON fields (attributes, inputs, output, summary) are stored as canonical
// text (see Canonicalize: separators ", " and ": ", keys in the order
// received, non-ASCII as \uXXXX, Python float repr) and sizes are computed
// at write time as the byte length of that text: start_size = attributes +
// inputs, end_size = output + summary. storage_size_bytes is their sum, so
// reads never re-serialise. An end always stores its output ("null", 4 bytes,
// when absent or null); a running call has no output and no summary (0).
// Example: inputs {"a": 5, "b": 10} (17) + attributes {} (2) = 19 while
// running; + output null (4) + summary {} (2) = 25 once ended.
//
// # Decisions
//
//   - ended_at before started_at is stored as sent (200), not rejected: an end
//     may arrive before its start (and must be kept), so the two timestamps are
//     often not both known when a write is validated, and clocks of the
//     processes that emit the start and the end may disagree. The derived
//     summary.platform.latency_ms is clamped at 0 so it is never negative.
//   - An end (or a display_name update) for a call whose start has not arrived
//     is kept as a pending row, invisible to reads and queries, and merged
//     when the start comes; nothing is lost whatever the order.
//   - A repeated start or end replaces the earlier one (client retries are
//     idempotent); a start without display_name keeps one set by an update.
//   - Ids (id, trace_id, parent_id) must be UUIDs (36-char form, any version)
//     or OpenTelemetry hex ids (32-hex trace id, 16-hex span id, not all
//     zero); they are stored as sent. Missing id/trace_id on start are new
//     UUIDv7s (NewUUIDv7: monotonic within this process).
//   - platform_user_id is always the authenticated user; the client's value
//     is ignored.
//   - A batch (/call/upsert_batch) is validated entirely before anything is
//     written and written in one transaction: any bad item is a 400 naming
//     its path (batch[3].req.started_at) and nothing of the batch is stored.
//     A start and an end of the same call in one batch are written as one
//     row insert.
//   - /calls/delete marks the calls and all their descendants (by parent_id,
//     recursively) deleted_at = now; num_deleted counts calls newly marked.
//     More than 1000 ids is a 413. Deleted calls read as {"call": null}, are
//     not listed, but still count in their root's total_storage_size_bytes.
//   - /call/read with an id that is not a valid id is a 400; a valid id that
//     is missing, pending or deleted is {"call": null}, as is any id in an
//     unknown project of the caller's own entity.
//   - /calls/query and /calls/stream_query both stream rows from the
//     database cursor through a 32 KiB buffer (flushed after the first row
//     and whenever full); stream_query writes application/jsonl. Sortable
//     fields: the record's scalar columns, storage_size_bytes and
//     summary.platform.{latency_ms,status,trace_name}; ties break on id.
//     op_names entries ending in ":*" match any version of an op reference.
//   - Costs: for each model of summary.usage, prompt_tokens = prompt_tokens +
//     input_tokens, completion_tokens = completion_tokens + output_tokens,
//     total_tokens = usage's total_tokens (prompt + completion when absent).
//     Price choice: prices already effective at the call's started_at first,
//     then project level over default level, then the latest effective_date.
//     When no price exists and Options.DefaultServicePrice is set, models the
//     service serves itself (Options.IsServedModel; by default BaseModels and
//     ids of the form entity/project/name[:stepN], artifact-URI prefix
//     allowed) get that price, reported with provider_id "flywheel",
//     pricing_level "default" and effective_date 1970-01-01.
//   - Default-level prices come from SetDefaultPrice, the prices file
//     (Options.PricesFile, loaded by New; see LoadPricesFile) or the CLI
//     (`flywheel prices`, cmd/flywheel). Setting a price for the same model, provider and
//     effective date replaces it, so reloading a file changes nothing. A file
//     entry without effective_date is effective from the Unix epoch. Prices
//     are read from an in-memory snapshot of trace_prices: writes through the
//     Service refresh it at once, writes by another process (the CLI on a
//     running server) are seen within a second.
//   - /cost/query returns the project-level prices of the project (the
//     Mongo-like "query" with $and/$or/$not/$eq/$gt/$gte/$lt/$lte/$in over
//     $getField/$literal); /cost/purge accepts only a query by ids. A
//     comparison is of a field with a literal of its type (string, number, or
//     an RFC 3339 string for dates; null never matches) or with a field of
//     its kind; anything else is a 400 naming the operand.
//   - Strings stored as text columns (op_name, display_name, exception,
//     thread_id, turn_id, platform_run_id, price fields, object classes) must
//     be valid UTF-8 without NUL characters (400 naming the field): that is
//     what PostgreSQL's text holds. Inside JSON values anything goes (the
//     canonical text escapes it).
//   - Sorting by summary.platform.status sorts by the status a read shows
//     (status_error, computed at write time, for descendant_error).
//
// # Objects and files
//
// The Weave SDKs save an op's code with /file/create and the op with
// /obj/create before its first call, and name the op in the call's op_name
// as weave:///entity/project/op/<object_id>:<digest>.
//
//   - Digests are Weave's (weave/shared/digest.py, and the TypeScript SDK's
//     computeDigest): SHA-256, base64url without padding, '-' as 'X' and '_'
//     as 'Y' (Digest). A file's digest is over its bytes; an object's over
//     json.dumps(val, sort_keys=True), i.e. the canonical JSON above with
//     every object's keys sorted. The SDKs compute file digests themselves
//     and reference files by them, so these must agree byte for byte.
//   - Objects are per (project, object_id), versioned: version_index counts
//     from 0 in creation order, the latest is the highest. Creating a value
//     whose digest the object already has changes nothing (same digest, no
//     new version). val is stored as canonical JSON in the order received
//     (size_bytes is its length); kind is "op" when the value's type is Op
//     (_type, or weave_type.type), else "object"; base_object_class and
//     leaf_object_class come from _class_name and _bases as in Weave.
//     builtin_object_class is only accepted when the value already declares
//     that class (Weave validates against a registry of builtin classes that
//     flywheel does not have), else 400.
//   - /obj/read takes a digest, "latest" or "v<N>"; a missing object (or an
//     unknown project of the caller's entity) is a 404. /objs/query filters
//     by object_ids, base_object_classes, exclude_base_object_classes,
//     leaf_object_classes, is_op and latest_only, sorts by object_id or
//     created_at (then created_at, insertion), and pages with limit/offset;
//     metadata_only returns val as {} and include_storage_size fills
//     size_bytes. ObjSchema has every key, nulls explicit; the creator is
//     platform_user_id (Weave: wb_user_id), as for calls.
//   - /file/create reads multipart/form-data (project_id, file) part by
//     part; /file/content answers the bytes as application/octet-stream, 404
//     when missing. Files are stored once per (project, digest) as BLOBs.
//   - Bounds: an object's stored JSON up to Options.MaxObjectBytes (16 MiB),
//     a file up to Options.MaxFileBytes (32 MiB); above them 413 naming
//     obj.val or file. object_id: 1 to 128 letters, digits, '_', '.', '-'.
//   - Tenancy as for calls: 401 without a key, 403 for another entity's
//     project.
//   - /call/upsert_batch items are {"mode", "req": {"start": {...}}} (the
//     Weave SDKs' shape) or {"mode", "req": {...}} (flat); errors name the
//     nested path (batch[0].req.start.started_at).
//   - GET /health ({}) and GET /server_info need no key.
package trace
