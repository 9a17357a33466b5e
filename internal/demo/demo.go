// Package demo is `flywheel demo`: the README's "see it learn" example. It
// talks to a running flywheel server over HTTP like any RL client would:
// it creates a model on the built-in tiny base model, then loops — sample
// groups of completions with logprobs through /v1/chat/completions, score
// them with a programmatic reward (the share of a target character in the
// reply), submit a training job, follow its events with a progress bar —
// and prints the mean reward per step, which rises as the model learns.
package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// Config is the demo's settings (flags).
type Config struct {
	URL, APIKey      string
	Project, Name    string
	BaseModel        string
	Steps            int
	Groups, PerGroup int
	MaxTokens        int
	Temperature      float64
	Target           rune
	LearningRate     float64 // 0: the server's default for the base model
	Seed             int64   // > 0: the model's untrained adapter (lora.seed) and every sampling request's seed derive from it (reproducible runs); 0: unseeded
	Poll             time.Duration
	HTTP             *http.Client
}

// Run parses args (flags; FLYWHEEL_URL and FLYWHEEL_API_KEY from the
// environment) and runs the demo, writing its progress to stdout.
func Run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stdout)
	c := Config{}
	fs.StringVar(&c.URL, "url", envOr("FLYWHEEL_URL", "http://127.0.0.1:8080"), "server URL (env FLYWHEEL_URL)")
	fs.StringVar(&c.APIKey, "api-key", os.Getenv("FLYWHEEL_API_KEY"), "API key (env FLYWHEEL_API_KEY)")
	fs.StringVar(&c.Project, "project", "demo", "project of the model to create")
	fs.StringVar(&c.Name, "name", "", "model name (default see-it-learn-<time>)")
	fs.StringVar(&c.BaseModel, "base-model", "flywheel/tiny", "base model")
	fs.IntVar(&c.Steps, "steps", 25, "training steps (one job each)")
	fs.IntVar(&c.Groups, "groups", 8, "trajectory groups per step (one prompt each)")
	fs.IntVar(&c.PerGroup, "group-size", 8, "completions per group")
	fs.IntVar(&c.MaxTokens, "max-tokens", 16, "max tokens per completion")
	fs.Float64Var(&c.Temperature, "temperature", 1, "sampling temperature")
	target := fs.String("target", "e", "the character whose share in the reply is the reward")
	fs.Float64Var(&c.LearningRate, "learning-rate", 0, "learning rate (0: the server's default for the base model)")
	fs.Int64Var(&c.Seed, "seed", 0, "seed of the untrained adapter and the sampling requests (0: unseeded)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	r, n := utf8.DecodeRuneInString(*target)
	if n == 0 || n != len(*target) {
		return fmt.Errorf("--target must be a single character")
	}
	c.Target = r
	if c.APIKey == "" {
		return fmt.Errorf("no API key: set FLYWHEEL_API_KEY or pass --api-key (create one with `flywheel keys create --user NAME`)")
	}
	if c.Name == "" {
		c.Name = "see-it-learn-" + time.Now().UTC().Format("20060102-150405")
	}
	_, err := RunConfig(ctx, c, stdout)
	return err
}

// Result is the mean reward before each training step (and after the last).
type Result struct {
	ModelID string
	Rewards []float64
}

// RunConfig runs the demo with c and returns the mean reward per step.
func RunConfig(ctx context.Context, c Config, out io.Writer) (Result, error) {
	if c.HTTP == nil {
		c.HTTP = &http.Client{Timeout: 10 * time.Minute}
	}
	if c.Poll == 0 {
		c.Poll = 200 * time.Millisecond
	}
	if c.BaseModel == "" {
		c.BaseModel = "flywheel/tiny"
	}
	cl := &client{c: c}
	var model struct {
		ID, Entity, Project, Name string
	}
	create := map[string]any{
		"entity": nil, "project": c.Project, "name": c.Name, "base_model": c.BaseModel, "return_existing": true,
	}
	if c.Seed > 0 {
		// The untrained adapter from the seed too (lora.seed, flywheel's
		// extension), so that a seeded run starts the same every time.
		create["lora"] = map[string]any{"seed": c.Seed}
	}
	if err := cl.do(ctx, "POST", "/v1/preview/models", create, &model); err != nil {
		return Result{}, fmt.Errorf("create model: %w", err)
	}
	served := model.Entity + "/" + model.Project + "/" + model.Name
	fmt.Fprintf(out, "model %s (%s) on %s; reward = share of %q in the reply\n", served, model.ID, c.BaseModel, string(c.Target))
	res := Result{ModelID: model.ID}
	for step := 0; step <= c.Steps; step++ {
		groups, mean, err := cl.sample(ctx, served, step)
		if err != nil {
			return res, err
		}
		res.Rewards = append(res.Rewards, mean)
		fmt.Fprintf(out, "step %3d  mean reward %.3f  %s\n", step, mean, bar(mean, 30))
		if step == c.Steps {
			break
		}
		body := map[string]any{"model_id": model.ID, "trajectory_groups": groups}
		if c.LearningRate > 0 {
			body["experimental_config"] = map[string]any{"learning_rate": c.LearningRate}
		}
		var job struct{ ID string }
		if err := cl.do(ctx, "POST", "/v1/preview/training-jobs", body, &job); err != nil {
			return res, fmt.Errorf("submit training job: %w", err)
		}
		if err := cl.follow(ctx, job.ID, out); err != nil {
			return res, err
		}
	}
	if n := len(res.Rewards); n > 1 {
		fmt.Fprintf(out, "mean reward %.3f -> %.3f over %d steps\n", res.Rewards[0], res.Rewards[n-1], n-1)
	}
	return res, nil
}

var prompts = []string{
	"Write a short sentence.", "Say something nice.", "Describe the sea.", "Tell me a story.",
	"Name a fruit.", "What is your favourite colour?", "Write a greeting.", "Describe a tree.",
}

// Reward is the share of target among the reply's non-whitespace characters.
func Reward(reply string, target rune) float64 {
	n, hit := 0, 0
	for _, r := range reply {
		if r == ' ' || r == '\n' || r == '\t' || r == '\r' {
			continue
		}
		n++
		if r == target {
			hit++
		}
	}
	if n == 0 {
		return 0
	}
	return float64(hit) / float64(n)
}

type client struct{ c Config }

// sample draws c.Groups groups of c.PerGroup completions and scores them.
// step numbers the sampling round, so seeded requests differ between rounds.
func (cl *client) sample(ctx context.Context, model string, step int) ([]any, float64, error) {
	c := cl.c
	groups := make([]any, c.Groups)
	sums := make([]float64, c.Groups)
	errs := make([]error, c.Groups)
	var wg sync.WaitGroup
	for g := 0; g < c.Groups; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			user := map[string]any{"role": "user", "content": prompts[g%len(prompts)]}
			var trajs []any
			for attempt := 0; len(trajs) < c.PerGroup; attempt++ {
				var resp struct {
					Choices []json.RawMessage `json:"choices"`
				}
				req := map[string]any{
					"model": model, "messages": []any{user}, "n": c.PerGroup - len(trajs),
					"temperature": c.Temperature, "max_tokens": c.MaxTokens,
					"logprobs": true, "return_tokens_as_token_ids": true,
				}
				if c.Seed > 0 {
					req["seed"] = c.Seed*1_000_003 + int64(step)*10_007 + int64(g)*101 + int64(attempt)
				}
				err := cl.do(ctx, "POST", "/v1/chat/completions", req, &resp)
				if err != nil {
					errs[g] = fmt.Errorf("chat completions: %w", err)
					return
				}
				if len(resp.Choices) == 0 {
					errs[g] = fmt.Errorf("chat completions returned no choices")
					return
				}
				for _, ch := range resp.Choices {
					var parsed struct {
						Message struct {
							Content *string `json:"content"`
						} `json:"message"`
					}
					json.Unmarshal(ch, &parsed)
					text := ""
					if parsed.Message.Content != nil {
						text = *parsed.Message.Content
					}
					r := Reward(text, c.Target)
					sums[g] += r
					trajs = append(trajs, map[string]any{"messages_and_choices": []any{user, ch}, "reward": r})
				}
			}
			groups[g] = map[string]any{"trajectories": trajs}
		}()
	}
	wg.Wait()
	var total float64
	for g := range sums {
		if errs[g] != nil {
			return nil, 0, errs[g]
		}
		total += sums[g]
	}
	return groups, total / float64(c.Groups*c.PerGroup), nil
}

// follow polls the job's events until it ends, drawing a progress bar over
// its gradient steps.
func (cl *client) follow(ctx context.Context, jobID string, out io.Writer) error {
	after := ""
	total, done := 0, 0
	start := time.Now()
	draw := func() {
		frac := 0.0
		if total > 0 {
			frac = float64(done) / float64(total)
		}
		fmt.Fprintf(out, "\r  training %s %d/%d gradient steps %5.1fs", bar(frac, 20), done, total, time.Since(start).Seconds())
	}
	for {
		q := url.Values{"limit": {"100"}}
		if after != "" {
			q.Set("after", after)
		}
		var page struct {
			Data []struct {
				ID   string         `json:"id"`
				Type string         `json:"type"`
				Data map[string]any `json:"data"`
			} `json:"data"`
			HasMore bool `json:"has_more"`
		}
		if err := cl.do(ctx, "GET", "/v1/preview/training-jobs/"+jobID+"/events?"+q.Encode(), nil, &page); err != nil {
			return fmt.Errorf("job events: %w", err)
		}
		for _, ev := range page.Data {
			after = ev.ID
			switch ev.Type {
			case "training_started":
				if n, ok := ev.Data["num_sequences"].(float64); ok {
					total = int(n)
				}
				draw()
			case "gradient_step":
				done++
				draw()
			case "training_ended":
				draw()
				fmt.Fprintln(out)
				return nil
			case "training_failed":
				fmt.Fprintln(out)
				return fmt.Errorf("training job %s failed: %v", jobID, ev.Data["error_message"])
			}
		}
		if page.HasMore {
			continue
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(cl.c.Poll):
		}
	}
}

func (cl *client) do(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(cl.c.URL, "/")+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+cl.c.APIKey)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := cl.c.HTTP.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		var e struct {
			Error struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if json.Unmarshal(data, &e) == nil && e.Error.Message != "" {
			return fmt.Errorf("%s %s: %d: %s", method, path, resp.StatusCode, e.Error.Message)
		}
		return fmt.Errorf("%s %s: %d: %s", method, path, resp.StatusCode, strings.TrimSpace(string(data)))
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("%s %s: decode response: %w", method, path, err)
		}
	}
	return nil
}

func bar(frac float64, width int) string {
	frac = min(max(frac, 0), 1)
	n := int(frac*float64(width) + 0.5)
	return "[" + strings.Repeat("#", n) + strings.Repeat("-", width-n) + "]"
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
