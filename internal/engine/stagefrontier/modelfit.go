package stagefrontier

import "github.com/laggard-dev/laggard/internal/signal"

// SyncModelLabel is the job label through which a workload declares its
// synchronization semantics.
const SyncModelLabel = "sync_model"

// syncModels are the workloads for which the paper validates the
// synchronization-wait exposure model: homogeneous synchronous data
// parallelism, and its FSDP FULL_SHARD / ZeRO-1 scope checks (§4, §6.4).
var syncModels = map[string]bool{"ddp": true, "fsdp": true, "zero1": true}

// ModelFitFromJob returns the App. C model-fit indicator m implied by the
// job's declared workload semantics: true only for a declared synchronous
// data-parallel workload, false (the safe default) otherwise.
func ModelFitFromJob(j *signal.Job) bool {
	return j != nil && syncModels[j.Labels[SyncModelLabel]]
}
