"""Runs OpenPipe ART (the `openpipe-art` package from PyPI, unmodified) against a
flywheel binary: `python check.py /path/to/flywheel`.

It starts `flywheel serve` on a free loopback port with a temporary data dir and
a bootstrap API key, points ART's ServerlessBackend at it (`api_key`, `base_url`
= the server's /v1) and drives the client's own calls:

- register a TrainableModel on the base model `flywheel/tiny`;
- an RL loop: sample groups with logprobs through `model.openai_client()` (the
  client's AsyncOpenAI) under `model.get_inference_name()`, score them with a
  deterministic reward (the share of letters that are "e"), train 3 steps
  (`model.train` on releases that have it, else `backend.train` + `model.log`);
  after each the step (`model.get_step()`) advances by one;
- on releases with backend.train's later options: loss_fn="ppo" trains (on a
  group with rewards of 0, which these releases leave out of the wire); options
  flywheel does not implement (kl_penalty_coef, truncated_importance_sampling)
  are a 400 naming the key;
- kill -9 of the server right after the client created a training job, and a
  restart on the same port and data dir: the client's own polling completes and
  the step advances by exactly one;
- `:step{N}` (the client's inference-name form) serves the new weights: the same
  seeded request at `:step0` and at the last step gives other logprobs, and the
  result's reported step is N;
- `model.delete_checkpoints()` leaves only the steps it keeps (the latest and the
  best by the val/reward logged with `model.log`), and a deleted
  step's name answers 404 through the client's OpenAI client;
- on releases with the exchanges form of a trajectory (0.5.23): rollouts of two
  chat calls each (the second sends the first answer back with a follow-up),
  captured by ART's own tracing (`art.trajectory(coroutine)`, which records
  the Chat Completions calls made through `model.openai_client()`, request and
  response as sent and received) and gathered by `art.trajectory_group`, each
  with its own reward; backend.train trains a step from the exchanges, every
  sampled token exactly once (the job's trainable tokens are the choices'
  logprob tokens), and the new step serves other logprobs than the one before;
- SFT: `model.train_sft` uploads its data as a W&B artifact to flywheel (the
  wandb SDK, WANDB_BASE_URL = the server) and trains a step from the
  artifact's URL (see sft()); then an SFT job through the client's own
  `sft_training_jobs` resource with a flywheel file id trains a step;
- `backend.delete(model)`: afterwards the model's names answer 404.

Any mismatch raises, and the process exits non-zero. The server is always
stopped (SIGTERM, then SIGKILL) and the temp dir removed; the whole run is
bounded by a watchdog (FLYWHEEL_ART_CHECK_TIMEOUT seconds, default 300).
"""

import asyncio
import contextlib
import importlib.metadata
import json
import os
import signal
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from flywheel_server import Server  # noqa: E402

KEY = "fw_art_python_check_0123456789abcdefghijklmn"  # the wandb SDK takes keys of 40+ characters
BASE_MODEL = "flywheel/tiny"
PROMPTS = ["Say a word.", "Name a colour.", "Tell me a fruit."]
GROUP_SIZE = 4
STEPS = 3
VAL_REWARDS = [0.2, 0.8, 0.5]  # model.log(split="val") after each of the STEPS steps
LEARNING_RATE = 5e-3  # large enough that flywheel/tiny's logprobs move visibly in 3 steps


def art_version() -> tuple[int, ...]:
    v = importlib.metadata.version("openpipe-art")
    return tuple(int(p) for p in v.split(".")[:3])


def art_server(binary: str) -> Server:
    """The shared loopback server (clients/lib) with the check's key; info logs: one line
    per request, which crash_recovery() watches for; a short lease so that a job of a
    killed server is run again soon after the restart."""
    return Server(binary, "--lease-timeout", "2s", key=KEY, log_level="info")


def check(cond: bool, msg: str) -> None:
    if not cond:
        raise AssertionError(msg)


def reward_of(text: str) -> float:
    """Deterministic score: the share of the letters that are 'e'."""
    letters = [c for c in text.lower() if c.isalpha()]
    return sum(c == "e" for c in letters) / len(letters) if letters else 0.0


async def sample_group(art, model, prompt: str):
    """One group: GROUP_SIZE completions of one prompt through the client's own
    OpenAI client, with logprobs, each a Trajectory scored by reward_of."""
    client = model.openai_client()
    messages = [{"role": "user", "content": prompt}]
    trajectories = []
    for i in range(GROUP_SIZE):
        resp = await client.chat.completions.create(
            model=model.get_inference_name(), messages=messages, max_tokens=12,
            temperature=1.0, logprobs=True, seed=1000 * len(prompt) + i,
        )
        choice = resp.choices[0]
        check(choice.logprobs is not None and len(choice.logprobs.content or []) > 0,
              f"completion without logprobs: {choice}")
        trajectories.append(art.Trajectory(
            messages_and_choices=[*messages, choice], reward=reward_of(choice.message.content or ""),
        ))
    return art.TrajectoryGroup(trajectories)


async def seeded_logprobs(model, step: int) -> list[float]:
    """The logprobs of one seeded completion at `:step{step}`."""
    resp = await model.openai_client().chat.completions.create(
        model=model.get_inference_name(step=step), messages=[{"role": "user", "content": PROMPTS[0]}],
        max_tokens=8, temperature=1.0, logprobs=True, seed=7,
    )
    return [t.logprob for t in resp.choices[0].logprobs.content]


async def later_options(art, backend, model) -> None:
    """backend.train's options of the newer releases: loss_fn="ppo" (sent as
    loss_fn and ppo) trains a step; options naming training flywheel does
    not implement are refused with a 400 naming the key (the client raises
    openai.BadRequestError from training_jobs.create) and train nothing."""
    import openai

    step = await model.get_step()
    groups = [await sample_group(art, model, PROMPTS[2])]
    # Rewards of exactly 0 are left out of the wire by these releases (their
    # trajectories serialise without fields equal to the defaults): make sure
    # some are there.
    for i, t in enumerate(groups[0].trajectories):
        t.reward = float(i % 2)
    result = await backend.train(model, groups, learning_rate=LEARNING_RATE, loss_fn="ppo", normalize_advantages=False)
    check(result.step == step + 1, f"loss_fn='ppo' trained to step {result.step}, want {step + 1}")
    for kwargs, key in [({"kl_penalty_coef": 0.1}, "kl_penalty_coef"),
                        ({"truncated_importance_sampling": 2.0}, "truncated_importance_sampling")]:
        try:
            await backend.train(model, groups, learning_rate=LEARNING_RATE, **kwargs)
        except openai.BadRequestError as e:
            param = (e.body or {}).get("param") if isinstance(e.body, dict) else None
            check(param == f"experimental_config.{key}", f"{kwargs}: 400 with param {param!r}: {e}")
        else:
            raise AssertionError(f"backend.train({kwargs}) trained; flywheel does not implement it")
    check(await model.get_step() == step + 1, "a refused training call moved the step")
    print(f"  loss_fn='ppo' trained step {step + 1}; kl_penalty_coef, truncated_importance_sampling: 400 naming the key")


EXCHANGE_REWARDS = [0.0, 0.25, 0.75, 1.0]  # one per rollout of exchanges(): a group with different rewards


async def exchange_rollout(art, model, i: int) -> None:
    """One rollout as ART 0.5.23's tracing expects it: plain chat calls through
    the client's OpenAI client, nothing returned; art.trajectory() records the
    calls. Two turns: the first answer is sent back with a follow-up question,
    in even rollouts as its role and content (ART's history of the calls then
    continues through that answer: one history, both answers its choices), in
    odd ones as the message object received (the openai SDK sends its fields,
    "refusal": null among them, which ART's histories count as another
    message than the answer it sampled: two histories, the answer context
    in the second). The reward is set on the trajectory being captured."""
    client = model.openai_client()

    async def ask(messages, seed):
        resp = await client.chat.completions.create(
            model=model.get_inference_name(), messages=messages, max_tokens=8,
            temperature=1.0, logprobs=True, seed=seed,
        )
        return resp.choices[0].message

    first = [{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}]
    answer = await ask(first, 100 * i)
    sent = answer if i % 2 else {"role": "assistant", "content": answer.content}
    await ask([*first, sent, {"role": "user", "content": "And another one?"}], 100 * i + 1)
    art.current_trajectory(require=True).reward = EXCHANGE_REWARDS[i]


async def exchanges(art, backend, model, server: Server) -> None:
    """The exchanges form of a trajectory (ART 0.5.23), captured by ART itself:
    a group of rollouts (exchange_rollout) under art.trajectory, trained with
    backend.train as the client sends it (model_dump of trajectories whose
    `exchanges.chat_completions` hold the calls; no messages_and_choices).
    Asserted: each trajectory holds its two calls, sent with ART's defaults for
    trainable models (return_token_ids among them) and answered with logprobs
    and without exact token ids; ART's own chat_completions_histories makes
    of them the histories exchange_rollout describes, each answer a choice
    once; the job completes with one new step and trains exactly the sampled
    tokens, each once; the new step serves other logprobs."""
    if "exchanges" not in art.Trajectory.model_fields:
        print(f"  exchanges: openpipe-art {importlib.metadata.version('openpipe-art')} has no exchanges form; skipped")
        return
    step = await model.get_step()
    before = await seeded_logprobs(model, step)
    group = await art.trajectory_group(
        art.trajectory(exchange_rollout(art, model, i)) for i in range(len(EXCHANGE_REWARDS)))
    check([t.reward for t in group.trajectories] == EXCHANGE_REWARDS,
          f"rewards {[t.reward for t in group.trajectories]}, want {EXCHANGE_REWARDS}")
    sampled = 0
    for i, t in enumerate(group.trajectories):
        calls = t.exchanges.chat_completions
        check(len(calls) == 2 and not t.messages_and_choices,
              f"captured {len(calls)} chat calls (messages_and_choices {t.messages_and_choices}), want 2")
        for c in calls:
            check(c.request.get("return_token_ids") is True and c.request.get("logprobs") is True,
                  f"the captured request lacks ART's defaults: {c.request}")
            extra = c.response.choices[0].model_extra or {}
            check("token_ids" not in extra and "prompt_token_ids" not in (c.response.model_extra or {}),
                  "flywheel answered return_token_ids with exact ids")
            sampled += len(c.response.choices[0].logprobs.content)
        # Per history, how many of its messages are choices (sampled answers).
        shape = [sum(s is not None and s.choice_index is not None for s in h.message_sources)
                 for h in t.chat_completions_histories()]
        want_shape = [1, 1] if i % 2 else [2]
        check(shape == want_shape, f"rollout {i}: ART's histories of its calls hold {shape} choices, want {want_shape}")
    result = await backend.train(model, [group], learning_rate=LEARNING_RATE)
    await model.log([group], metrics=result.metrics, step=result.step, split="train")
    new = await model.get_step()
    check(result.step == new == step + 1, f"exchanges trained to step {result.step} (get_step {new}), want {step + 1}")
    job = last_job(server)
    met = job.get("metrics") or {}
    want = {"num_trajectories": len(EXCHANGE_REWARDS), "num_skipped_trajectories": 0,
            "num_trajectories_without_logprobs": 0, "num_truncated": 0, "num_trainable_tokens": sampled}
    check(job.get("status") == "COMPLETED" and all(met.get(k) == v for k, v in want.items()),
          f"exchanges job record {job}, want metrics {want}")
    after = await seeded_logprobs(model, new)
    check(after != before, f"the exchanges step {new} serves the logprobs of step {step}")
    print(f"  exchanges (art.trajectory capture, 2 calls x {len(EXCHANGE_REWARDS)} rollouts): step {step} -> {new}, "
          f"{sampled} sampled tokens trained once each, logprobs moved")


async def train_once(art, backend, model, groups) -> None:
    """One training call as the release offers it: model.train (0.5.17, which
    also logs the groups) or backend.train + model.log (0.5.18+)."""
    if art_version() < (0, 5, 18):
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            await model.train(groups, config=art.TrainConfig(learning_rate=LEARNING_RATE))
    else:
        result = await backend.train(model, groups, learning_rate=LEARNING_RATE)
        await model.log(groups, metrics=result.metrics, step=result.step, split="train")


async def crash_recovery(art, backend, model, server: Server) -> None:
    """kill -9 of the server while the client trains: as soon as the client has
    created its training job, the server dies and comes back on the same port
    and data dir. The client's own polling (its GETs retry on connection
    errors) must then see the job end, and the step must advance by exactly
    one, with exactly one new checkpoint."""
    step = await model.get_step()
    before = await checkpoint_steps(server, model)
    groups = [await sample_group(art, model, p) for p in PROMPTS]
    mark = len(server.tail(1 << 30))
    task = asyncio.create_task(train_once(art, backend, model, groups))
    deadline = time.monotonic() + 30
    while '"POST /v1/preview/training-jobs"' not in server.tail(1 << 30)[mark:]:
        check(time.monotonic() < deadline and not task.done(),
              f"no training job was created: {task.exception() if task.done() else 'timeout'}")
        await asyncio.sleep(0.005)
    await asyncio.to_thread(server.kill9_and_restart)
    t0 = time.monotonic()
    await asyncio.wait_for(task, 120)
    new = await model.get_step()
    after = await checkpoint_steps(server, model)
    check(new == step + 1, f"after kill -9 mid-training the step is {new}, want {step + 1}")
    check(after == before + [step + 1], f"after kill -9 mid-training the checkpoints are {after}, want {before + [step + 1]}")
    print(f"  kill -9 right after the job's creation: the client's polling finished "
          f"{time.monotonic() - t0:.1f} s after the restart; step {step} -> {new}, one new checkpoint")


def last_job(server: Server) -> dict:
    """The record of the training job the client polled last (its id from the
    server's request log: the client's GET .../training-jobs/{id}/events)."""
    import re
    ids = re.findall(r"path=/v1/preview/training-jobs/([0-9a-f-]+)/events", server.tail(1 << 30))
    check(bool(ids), "no training job was polled")
    status, job = server.get(f"/v1/preview/training-jobs/{ids[-1]}")
    check(status == 200, f"GET training job {ids[-1]}: {status} {job}")
    return job


async def checkpoint_steps(server: Server, model) -> list[int]:
    status, body = server.get(f"/v1/preview/models/{model.id}/checkpoints?limit=100&order=asc")
    check(status == 200, f"list checkpoints: {status} {body}")
    return [c["step"] for c in body["data"]]


async def rl(art, backend, model, server: Server) -> None:
    old = art_version() < (0, 5, 18)
    step0 = await model.get_step()
    check(step0 == 0, f"a new model's step is {step0}, want 0")
    before = await seeded_logprobs(model, 0)
    for i in range(STEPS):
        groups = [await sample_group(art, model, p) for p in PROMPTS[:2]]
        rewards = [t.reward for g in groups for t in g.trajectories]
        t0 = time.monotonic()
        if old:
            # 0.5.17: the (deprecated) model.train, which also logs the groups.
            import warnings
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                await model.train(groups, config=art.TrainConfig(learning_rate=LEARNING_RATE))
            reported = None
        else:
            # Newer releases dropped model.train: backend.train + model.log.
            result = await backend.train(model, groups, learning_rate=LEARNING_RATE)
            await model.log(groups, metrics=result.metrics, step=result.step, split="train")
            reported = result.step
        step = await model.get_step()
        # A validation score per step (model.log, split "val"), the best at step 2, for
        # delete_checkpoints to keep besides the latest.
        await model.log([art.TrajectoryGroup([art.Trajectory(
            messages_and_choices=[{"role": "user", "content": "v"}, {"role": "assistant", "content": "v"}],
            reward=VAL_REWARDS[i])])], split="val", step=step)
        print(f"  step {step}: mean reward {sum(rewards) / len(rewards):.3f}, "
              f"train {time.monotonic() - t0:.1f} s")
        check(step == step0 + i + 1, f"after train() #{i + 1} the step is {step}, want {step0 + i + 1}")
        # The sampled tokens and logprobs reached the trainer (none trained as text).
        job = last_job(server)
        met = job.get("metrics") or {}
        check(job.get("status") == "COMPLETED" and met.get("num_trajectories") == len(rewards)
              and met.get("num_trajectories_without_logprobs") == 0, f"job record {job}")
        if reported is not None:
            check(reported == step, f"backend.train reported step {reported}, get_step says {step}")
            check(result.artifact_name and result.artifact_name.endswith(f":step{step}"),
                  f"artifact_name {result.artifact_name!r} does not name :step{step}")
    if not old:
        await later_options(art, backend, model)
    await crash_recovery(art, backend, model, server)
    last = await model.get_step()
    after = await seeded_logprobs(model, last)
    again = await seeded_logprobs(model, 0)
    check(again == before, f":step0 changed after training: {before} vs {again}")
    n = min(len(before), len(after))
    diff = max(abs(a - b) for a, b in zip(before[:n], after[:n]))
    check(diff > 1e-4, f":step{last} serves the same logprobs as :step0 (max diff {diff})")
    print(f"  :step0 vs :step{last}: logprobs differ by up to {diff:.4f}")

    # Latest-name inference (no :step) is the latest checkpoint.
    latest = await model.openai_client().chat.completions.create(
        model=model.get_inference_name(), messages=[{"role": "user", "content": PROMPTS[0]}],
        max_tokens=8, temperature=1.0, logprobs=True, seed=7,
    )
    check([t.logprob for t in latest.choices[0].logprobs.content] == after,
          "the model's plain name does not serve its latest step")

    steps = await checkpoint_steps(server, model)
    check(steps == list(range(last + 1)), f"checkpoints {steps}, want 0..{last}")
    await model.delete_checkpoints()  # keeps the latest and the best by val/reward
    kept = await checkpoint_steps(server, model)
    best = step0 + 1 + VAL_REWARDS.index(max(VAL_REWARDS))
    check(kept == sorted({best, last}), f"delete_checkpoints kept {kept} of {steps}, want {sorted({best, last})}")
    gone = [s for s in steps if s not in kept]
    import openai
    for s in gone:
        try:
            await seeded_logprobs(model, s)
        except openai.NotFoundError:
            continue
        raise AssertionError(f":step{s} still served after delete_checkpoints")
    print(f"  delete_checkpoints kept {kept}; {gone} answer 404")


async def sft(art, backend, model) -> None:
    """SFT through the client's own calls.

    model.train_sft (ServerlessBackend._train_sft) first uploads the JSONL to
    W&B artifacts with the wandb SDK (wandb.init + log_artifact + wait, then
    run.finish), with WANDB_BASE_URL = the server (set in run()) and the
    flywheel key: flywheel serves that part of W&B's API (docs/compatibility.md).
    Then it posts `training_data_url:
    "wandb-artifact:///{entity}/{project}/{name}-sft-data-{id}:v0"` to
    /v1/preview/sft-training-jobs, which flywheel resolves to the uploaded
    file, and polls the job's events. Asserted: the step advances by one and
    the new step serves other logprobs than the one before. WANDB_MODE is
    online and WANDB_API_KEY set only for this call (elsewhere the check
    keeps W&B disabled, so the RL part logs no W&B runs).

    Then the same SFT wire through ART's own serverless client resource
    (Client.sft_training_jobs.create and its events, polled as _train_sft
    polls them), with the JSONL uploaded through the client's OpenAI client
    (files.create) and passed as training_data_url, as docs/compatibility.md
    says flywheel takes it too: the step advances by one and the new step serves.
    """
    from openai import NOT_GIVEN

    step = await model.get_step()
    before = await seeded_logprobs(model, step)
    rows = [[{"role": "user", "content": "Say hello."}, {"role": "assistant", "content": "Hello there!"}]] * 4
    trajectories = [art.Trajectory(messages_and_choices=r, reward=0.0) for r in rows]
    # The key too: wandb.init initialises weave when it is imported (0.5.23 imports it), and
    # weave, without WANDB_API_KEY, would ask for one on stdin; with it, it logs to flywheel.
    os.environ.update(WANDB_MODE="online", WANDB_API_KEY=KEY)
    try:
        await model.train_sft(trajectories, config=art.types.TrainSFTConfig(learning_rate=1e-2, batch_size=2))
    finally:
        # ART opens a W&B run of its own to log the job's metrics (model._get_wandb_run,
        # reinit="create_new" in 0.5.23, so not wandb.run): tear wandb down now, while the
        # server is up, or wandb's exit hook would keep retrying it against a stopped server.
        import wandb
        wandb.teardown()
        os.environ["WANDB_MODE"] = "disabled"
        del os.environ["WANDB_API_KEY"]
    new = await model.get_step()
    check(new == step + 1, f"after model.train_sft the step is {new}, want {step + 1}")
    after = await seeded_logprobs(model, new)
    check(after != before, f"model.train_sft's step {new} serves the logprobs of step {step}")
    print(f"  model.train_sft (W&B artifact on flywheel): step {step} -> {new}, logprobs moved")

    step = new
    data = "".join(json.dumps({"messages": r}) + "\n" for r in rows).encode()
    f = await model.openai_client().files.create(file=("sft.jsonl", data), purpose="fine-tune")
    job = await backend._client.sft_training_jobs.create(
        model_id=model.id, training_data_url=f.id,
        config={"batch_size": 2, "learning_rate": 1e-3, "assistant_turns": "all"},
    )
    after, started, ended = None, False, False
    deadline = time.monotonic() + 120
    while not ended:
        check(time.monotonic() < deadline, "the SFT job did not end in 120 s")
        await asyncio.sleep(0.2)
        async for event in backend._client.sft_training_jobs.events.list(
            training_job_id=job.id, after=after or NOT_GIVEN
        ):
            if event.type == "training_failed":
                raise AssertionError(f"SFT job failed: {event.data}")
            if event.type == "training_started":
                started = True
                continue  # _train_sft does not advance its cursor past it either
            if event.type == "training_ended":
                ended = True
                break
            after = event.id
    check(started, "no training_started event before training_ended")
    new = await model.get_step()
    check(new == step + 1, f"after SFT the step is {new}, want {step + 1}")
    resp = await model.openai_client().chat.completions.create(
        model=model.get_inference_name(step=new), messages=[{"role": "user", "content": "Say hello."}],
        max_tokens=8, temperature=0.0)
    check(resp.choices[0].message.content is not None, "the SFT step served no content")
    print(f"  SFT job {job.id} through the client's sft_training_jobs: step {step} -> {new}, "
          f":step{new} says {resp.choices[0].message.content!r}")


async def run(binary: str) -> None:
    import art
    import openai
    from art.serverless.backend import ServerlessBackend

    server = art_server(binary)
    try:
        server.wait_healthy()
        base_path = os.path.join(server.dir, "art")
        backend = ServerlessBackend(api_key=KEY, base_url=server.base + "/v1")
        # model.train_sft's wandb SDK talks to flywheel's W&B API (see sft()).
        # weave, which wandb.init initialises there, logs to flywheel's call store (its
        # default is WANDB_BASE_URL + "/traces", which flywheel does not serve).
        os.environ.update(WANDB_BASE_URL=server.base, WF_TRACE_SERVER_URL=server.base)
        kwargs = {"name": "art-ci", "project": "art-python-check", "base_model": BASE_MODEL, "base_path": base_path}
        if art_version() >= (0, 5, 18):
            kwargs["run_name"] = "art-ci"
        model = art.TrainableModel(**kwargs)
        await model.register(backend)
        check(model.id is not None and model.entity, f"register left id={model.id} entity={model.entity}")
        print(f"registered {model.id} as {model.get_inference_name()}")

        await rl(art, backend, model, server)

        await exchanges(art, backend, model, server)

        await sft(art, backend, model)

        name = model.get_inference_name()
        await backend.delete(model)
        try:
            await model.openai_client().chat.completions.create(
                model=name, messages=[{"role": "user", "content": "hi"}], max_tokens=2)
        except openai.NotFoundError:
            pass
        else:
            raise AssertionError(f"{name} still served after backend.delete")
        status, _ = server.get(f"/v1/preview/models/{model.id}/checkpoints")
        check(status == 404, f"checkpoints of a deleted model: {status}, want 404")
        with contextlib.suppress(Exception):
            await model.openai_client().close()
        await backend.close()
        print("deleted the model; its names answer 404")
    except BaseException:
        print("--- server log (tail) ---\n" + server.tail(), file=sys.stderr)
        raise
    finally:
        server.stop()


def main() -> None:
    if len(sys.argv) != 2:
        print("usage: python check.py /path/to/flywheel", file=sys.stderr)
        sys.exit(2)
    timeout = float(os.environ.get("FLYWHEEL_ART_CHECK_TIMEOUT", "300"))
    # SIGTERM (e.g. from `timeout`) unwinds like an error, so the server is stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("check.py: terminated"))
    print(f"openpipe-art {importlib.metadata.version('openpipe-art')} on Python {sys.version.split()[0]}")
    t0 = time.monotonic()
    asyncio.run(asyncio.wait_for(run(sys.argv[1]), timeout))
    # The serverless path must not have needed a tokenizer or torch on the client.
    for mod in ("torch", "transformers"):
        check(mod not in sys.modules, f"{mod} was imported by the serverless client path")
    print(f"ok ({time.monotonic() - t0:.0f} s)")


if __name__ == "__main__":
    main()
