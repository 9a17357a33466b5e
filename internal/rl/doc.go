// Package rl is the training-job domain of the wire contract (api.md,
// rl.md), defined once for the HTTP layer and the trainer:
//
//   - the typed RL request (Request and its trajectories) and its
//     validation in one pass over the bytes with JSON-path errors
//     (Validate, ValidateStream, over the allocation-free walker of scan.go);
//     a trajectory's histories (Trajectory.Histories), for the exchanges
//     form (ART's captured Chat Completions calls) built as ART builds them
//     (exchanges.go);
//   - a job's config, resolved once when the job is submitted (ResolveJob):
//     experimental_config's fields, defaults and ranges (Resolve), the SFT
//     request (ParseSFTRequest) and config (ResolveSFTConfig), the default
//     learning rate (DefaultLearningRate, the one rule) and the data-order
//     seed. The job record stores the result and the trainer runs exactly
//     what it stores (RecordedJob);
//   - the SFT training file: one reader (ReadSFTFile) and one check of a
//     line (ParseSFTLine), for the upload and the trainer;
//   - advantages, the per-token loss and the reward statistics of rl.md
//     (GroupAdvantages, TrajectoryWeight, Normalize, Loss, RewardStats).
//
// The api package validates, resolves and records jobs with it; the jobs
// queue reads the record back for the trainer; the train package parses
// the stored trajectories and computes the loss with it. Errors are
// *httpx.Error values naming the JSON path of the offending field, so the
// HTTP layer returns them as they are and the trainer's messages name the
// same paths.
package rl
