// Package rl is the training-job domain of the wire contract (api.md,
// rl.md), defined once for the HTTP layer and the trainer:
//
//   - the typed RL request (Request and its trajectories) and its
//     validation in one pass over the bytes with JSON-path errors
//     (Validate, ValidateStream, over the allocation-free walker of scan.go);
//   - experimental_config: its fields, defaults and ranges (Resolve is the
//     one function that decides them), and the job record that echoes it
//     with defaults filled (RecordConfig);
//   - the SFT job's config (SFTConfig), which shares the default learning
//     rates and the same JSON-path errors;
//   - advantages and the per-token loss of rl.md (GroupAdvantages,
//     TrajectoryWeight, Normalize, Loss).
//
// The api package validates and records jobs with it; the train package
// parses the stored request and computes the loss with it. Errors are
// *httpx.Error values naming the JSON path of the offending field, so the
// HTTP layer returns them as they are and the trainer's messages name the
// same paths.
package rl
