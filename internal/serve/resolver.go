package serve

import (
	"context"
	"errors"
	"fmt"

	"flywheel/internal/auth"
	"flywheel/internal/store"
)

// ModelStore is the part of store.Models the resolver reads.
type ModelStore interface {
	ModelByName(ctx context.Context, entity, project, name string) (store.TrainedModel, error)
	ListModels(ctx context.Context, entities []string) ([]store.TrainedModel, error)
	CheckpointByStep(ctx context.Context, modelID string, step int) (store.Checkpoint, error)
	LatestCheckpoint(ctx context.Context, modelID string) (store.Checkpoint, error)
}

// StoreResolver resolves trained models through the store.
type StoreResolver struct {
	models ModelStore
}

// NewStoreResolver returns a Resolver over the store's models.
func NewStoreResolver(models ModelStore) *StoreResolver { return &StoreResolver{models: models} }

// Resolve implements Resolver.
func (r *StoreResolver) Resolve(ctx context.Context, p *auth.Principal, model string) (Target, error) {
	ref, ok := ParseModelRef(model)
	if !ok {
		return Target{}, ModelNotFound("model %q is not a trained model address entity/project/name[:step{N}]", model)
	}
	notFound := ModelNotFound("model %q not found", ref.Entity+"/"+ref.Project+"/"+ref.Name)
	if !p.Member(ref.Entity) {
		return Target{}, notFound
	}
	m, err := r.models.ModelByName(ctx, ref.Entity, ref.Project, ref.Name)
	if errors.Is(err, store.ErrNotFound) {
		return Target{}, notFound
	}
	if err != nil {
		return Target{}, err
	}
	var ck store.Checkpoint
	if ref.Step >= 0 {
		ck, err = r.models.CheckpointByStep(ctx, m.ID, ref.Step)
		if errors.Is(err, store.ErrNotFound) {
			return Target{}, ModelNotFound("model %s/%s/%s has no checkpoint at step %d", m.Entity, m.Project, m.Name, ref.Step)
		}
	} else {
		ck, err = r.models.LatestCheckpoint(ctx, m.ID)
		if errors.Is(err, store.ErrNotFound) {
			return Target{}, ModelNotFound("model %s/%s/%s has no checkpoint", m.Entity, m.Project, m.Name)
		}
	}
	if err != nil {
		return Target{}, err
	}
	return targetOf(m, ck.Step, ck.Dir), nil
}

// List implements Resolver.
func (r *StoreResolver) List(ctx context.Context, p *auth.Principal) ([]Target, error) {
	ms, err := r.models.ListModels(ctx, p.Entities)
	if err != nil {
		return nil, err
	}
	out := make([]Target, 0, len(ms))
	for _, m := range ms {
		out = append(out, targetOf(m, m.LatestStep, ""))
	}
	return out, nil
}

func targetOf(m store.TrainedModel, step int, dir string) Target {
	name := fmt.Sprintf("%s/%s/%s", m.Entity, m.Project, m.Name)
	return Target{Name: name, BaseModel: m.BaseModel, AdapterDir: dir, Step: step,
		Entity: m.Entity, Project: m.Project, ModelName: m.Name, Created: m.CreatedAt}
}
