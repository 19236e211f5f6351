# Airlock — build, generate, test. `make help` lists the targets.
SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec

include hack/versions.env
export

VERSION ?= 0.1.0
AIRLOCK_CACHE ?= $(HOME)/.cache/airlock
K8S_BIN_DIR := $(AIRLOCK_CACHE)/k8s/$(K8S_VERSION)
TOOLS_DIR := $(AIRLOCK_CACHE)/tools
LOCALBIN := $(CURDIR)/bin
CONTROLLER_GEN := $(TOOLS_DIR)/controller-gen-$(CONTROLLER_TOOLS_VERSION)
GOLANGCI_LINT := $(TOOLS_DIR)/golangci-lint-$(GOLANGCI_LINT_VERSION)
HELM := $(TOOLS_DIR)/helm-$(HELM_VERSION)
GO_TEST_FLAGS ?=

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"} /^[a-zA-Z0-9_-]+:.*##/ {printf "  %-18s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

##@ Generate

.PHONY: manifests
manifests: $(CONTROLLER_GEN) ## Generate CRDs and RBAC into config/ from the API and controller markers.
	$(CONTROLLER_GEN) rbac:roleName=airlock-manager crd paths="./api/..." paths="./internal/controller/..." \
		output:crd:artifacts:config=config/crd/bases output:rbac:artifacts:config=config/rbac

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Generate deepcopy code.
	$(CONTROLLER_GEN) object:headerFile="hack/boilerplate.go.txt" paths="./api/..."

.PHONY: verify
verify: manifests generate ## Regenerate everything and fail if the tree changed.
	@git diff --exit-code -- api config || { echo "generated files are stale: run 'make manifests generate' and commit"; exit 1; }
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt needed"; exit 1; }

##@ Build

.PHONY: build
build: ## Build the manager, airlock-init and airlock CLI binaries into bin/ (also as bin/kubectl-airlock, a kubectl plugin).
	CGO_ENABLED=0 go build -trimpath -o $(LOCALBIN)/manager ./cmd/manager
	CGO_ENABLED=0 go build -trimpath -o $(LOCALBIN)/airlock-init ./cmd/airlock-init
	CGO_ENABLED=0 go build -trimpath -o $(LOCALBIN)/airlock ./cmd/airlock
	ln -sf airlock $(LOCALBIN)/kubectl-airlock

.PHONY: lint
lint: $(GOLANGCI_LINT) ## go vet and golangci-lint (built from the Go module proxy into the machine-wide cache).
	go vet ./...
	go vet -tags registry ./test/helm/
	cd hack/tools/release && go vet ./...
	$(GOLANGCI_LINT) run ./...

##@ Demo

.PHONY: preflight
preflight: ## Check Go and install the Debian packages make demo/test need (make, git, curl, python3, jq, binutils...).
	hack/preflight.sh

.PHONY: demo
demo: preflight ## Airlock end to end: local cluster (or $$KUBECONFIG), Helm install, key, and an agent's loop via curl.
	hack/demo.sh

##@ Test

.PHONY: test
test: preflight verify test-unit test-sdk test-chart test-integration test-e2e ## Everything CI runs: verify, unit, chart, integration (envtest), end-to-end (local cluster).

.PHONY: test-unit
test-unit: ## Unit tests of the pure parts (no API server).
	go test $(GO_TEST_FLAGS) ./api/... ./internal/... ./cmd/... ./test/hack/... -skip 'Integration'
	cd hack/tools/release && go test $(GO_TEST_FLAGS) ./...

# Debian's Python, which sees python3-httpx and python3-pytest (hack/preflight.sh), not a pyenv shim's.
PYTHON ?= /usr/bin/python3

.PHONY: test-sdk
test-sdk: ## Unit tests of the SDKs (pkg/client, sdk/python, sdk/typescript; their integration runs in test-e2e: TestSDK, TestSDKTypeScript).
	go test $(GO_TEST_FLAGS) ./pkg/...
	PYTHONPATH=sdk/python PYTHONDONTWRITEBYTECODE=1 $(PYTHON) -m pytest -q -p no:cacheprovider sdk/python/tests
	hack/npm-deps.sh sdk/typescript
	cd sdk/typescript && npm test

.PHONY: envtest-assets
envtest-assets: ## Build etcd, kube-apiserver and kubectl for envtest into the machine-wide cache (first time 15-20 min).
	hack/build-k8s.sh

.PHONY: test-integration
test-integration: envtest-assets ## Integration tests against a real kube-apiserver + etcd (envtest).
	KUBEBUILDER_ASSETS=$(K8S_BIN_DIR) go test $(GO_TEST_FLAGS) $(INTEGRATION_PKGS) -run 'Integration' -count=1 -v

# The integration suites, as test-integration runs them; test-compat runs them on the floor version.
INTEGRATION_PKGS := ./internal/controller/... ./internal/gateway/... ./internal/webhook/... ./internal/doctor/... ./cmd/manager/... ./cmd/gateway/...
K8S_COMPAT_BIN_DIR := $(AIRLOCK_CACHE)/k8s/$(K8S_COMPAT_VERSION)

.PHONY: test-compat
test-compat: ## The envtest suites on the oldest Kubernetes Airlock supports (K8S_COMPAT_VERSION; first build ~30 min). Not in `make test`.
	hack/build-k8s.sh --version $(K8S_COMPAT_VERSION)
	KUBEBUILDER_ASSETS=$(K8S_COMPAT_BIN_DIR) go test $(GO_TEST_FLAGS) $(INTEGRATION_PKGS) -run 'Integration' -count=1 -v

.PHONY: test-e2e
test-e2e: $(HELM) ## End-to-end tests on the local cluster, then a Helm install (brings it up and down; first time builds it).
	AIRLOCK_E2E_HELM=$(HELM) hack/e2e.sh $(E2E_FLAGS)

.PHONY: bench-e2e
bench-e2e: ## Benchmarks on the local cluster: create->Ready vs a bare pod, and during an exec flood; warm pool claims vs cold; exec latency breakdown and fan-out throughput vs client-go; memory headroom.
	hack/e2e.sh -run '^$$' -bench 'BenchmarkColdReady|BenchmarkWarmStart|BenchmarkCreateToFirstResult|BenchmarkExecTrue|BenchmarkExecFanout|BenchmarkMixedOutputs|BenchmarkMemoryHeadroom|BenchmarkCreateReadyUnderExecFlood' -benchtime 1x

.PHONY: bench-scale
bench-scale: envtest-assets ## Benchmark: 10,000 Sandboxes on 50 kwok-simulated nodes against etcd, kube-apiserver, -scheduler, -controller-manager (docs/performance.md).
	hack/build-k8s.sh kube-scheduler kube-controller-manager
	KUBEBUILDER_ASSETS=$(K8S_BIN_DIR) AIRLOCK_KWOK=$$(hack/build-kwok.sh) go test ./test/scale/... -run '^$$' -bench BenchmarkScale -benchtime 1x -count=1 -timeout 90m -v

.PHONY: bench-envtest
bench-envtest: envtest-assets ## Benchmark: 1,000 Sandboxes vs 1,000 pods+policies on envtest (docs/performance.md).
	KUBEBUILDER_ASSETS=$(K8S_BIN_DIR) go test ./internal/controller/... -run '^$$' -bench BenchmarkCreateSandboxes -benchtime 1x -count=1 -timeout 30m

##@ Tools

$(GOLANGCI_LINT):
	@mkdir -p $(TOOLS_DIR)
	GOBIN=$(TOOLS_DIR) go install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
	mv -f $(TOOLS_DIR)/golangci-lint $@

$(CONTROLLER_GEN):
	@mkdir -p $(TOOLS_DIR)
	GOBIN=$(TOOLS_DIR) go install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_TOOLS_VERSION)
	mv -f $(TOOLS_DIR)/controller-gen $@

##@ Cluster

.PHONY: cluster-up
cluster-up: ## Start the local single-node cluster (builds what is missing; first time ~1 h). See docs/local-cluster.md.
	hack/local-cluster.sh up

.PHONY: cluster-down
cluster-down: ## Stop the local cluster and undo every host change it made.
	hack/local-cluster.sh down

.PHONY: cluster-status
cluster-status: ## Daemons, node and pods of the local cluster.
	hack/local-cluster.sh status

.PHONY: images
images: ## Build the pause and sandbox images; imported into the local cluster now if it runs, else when it comes up.
	hack/images.sh all

##@ Images and deploy

# Image names come from one place: IMAGE_REPO and VERSION here, linked into the binaries (internal/version), so
# the manager's default --init-image always names the init image built alongside it.
IMAGE_REPO ?= localhost/airlock
IMAGES_DIR := $(LOCALBIN)/images
IMAGE_LDFLAGS := -s -w -X airlock.dev/airlock/internal/version.Version=$(VERSION) -X airlock.dev/airlock/internal/version.ImageRepository=$(IMAGE_REPO)
# What helm's own Makefile links in: without it `helm template` assumes Kubernetes v1.20 and `helm version`
# is vague. The Kubernetes minor is ours (K8S_VERSION).
HELM_K8S := helm.sh/helm/v3/pkg/chartutil.k8sVersion helm.sh/helm/v3/pkg/lint/rules.k8sVersion
HELM_LDFLAGS := -X helm.sh/helm/v3/internal/version.version=$(HELM_VERSION) \
	$(foreach v,$(HELM_K8S),-X $(v)Major=1 -X $(v)Minor=$(word 2,$(subst ., ,$(K8S_VERSION))))
KUBECTL ?= $(K8S_BIN_DIR)/kubectl
CHART_DIR := charts/airlock
# The gateway image is built once cmd/gateway exists.
AIRLOCK_IMAGES := manager init egress-proxy $(if $(wildcard cmd/gateway/main.go),gateway)
# Import into the local cluster's containerd while it runs; built while it is down, an image is imported by
# the next `hack/local-cluster.sh up`.
IMAGE_IMPORT_ENV = AIRLOCK_IMAGES_DEFER_IMPORT=1

# image NAME, cmd directory, binary name: static build, then one image named $(IMAGE_REPO)/NAME:$(VERSION).
define airlock_image
	CGO_ENABLED=0 go build -trimpath -ldflags "$(IMAGE_LDFLAGS)" -o $(IMAGES_DIR)/bin/$(3) ./cmd/$(2)
	$(IMAGE_IMPORT_ENV) AIRLOCK_IMAGE_OUT=$(IMAGES_DIR)/$(1)-$(VERSION).tar hack/images.sh binary $(IMAGE_REPO)/$(1):$(VERSION) $(IMAGES_DIR)/bin/$(3)
endef

# `make images` (Cluster section) also builds Airlock's own images first.
images: images-airlock

.PHONY: images-airlock image-manager image-gateway image-init image-egress-proxy
images-airlock: $(addprefix image-,$(AIRLOCK_IMAGES)) ## Build manager, gateway, init and egress-proxy images into bin/images/ (imported when the local cluster runs).
image-manager:
	$(call airlock_image,manager,manager,manager)
image-init:
	$(call airlock_image,init,airlock-init,airlock-init)
image-egress-proxy:
	$(call airlock_image,egress-proxy,egress-proxy,egress-proxy)
image-gateway:
	@test -f cmd/gateway/main.go || { echo "cmd/gateway does not exist yet"; exit 1; }
	$(call airlock_image,gateway,gateway,gateway)

.PHONY: chart-sync
chart-sync: ## Copy the generated CRDs and the manager's two ClusterRoles from config/ into the Helm chart.
	cp config/crd/bases/*.yaml $(CHART_DIR)/crds/
	cp config/rbac/role.yaml $(CHART_DIR)/files/manager-role.yaml

.PHONY: test-chart
test-chart: $(HELM) envtest-assets ## Helm lint, render the chart with the main switches, and run its Go tests (test/chart).
	$(HELM) lint --strict $(CHART_DIR)
	$(HELM) lint --strict $(CHART_DIR) -f $(CHART_DIR)/ci/local-cluster-values.yaml --set serviceMonitor.enabled=true
	@for set in "" "runtimeClasses.kata.enabled=true,runtimeClasses.gvisor.enabled=false" "tenants[0].name=team-a,tenants[1].name=team-b" \
		"gateway.replicas=3" "serviceMonitor.enabled=true" "networkPolicy.enabled=false" "gateway.enabled=false"; do \
		echo "helm template --set '$$set'"; $(HELM) template airlock $(CHART_DIR) -n airlock-system --include-crds $${set:+--set "$$set"} >/dev/null; done
	AIRLOCK_HELM=$(HELM) go test $(GO_TEST_FLAGS) ./test/chart/... -count=1

.PHONY: deploy
deploy: ## Install CRDs, RBAC, manager and gateway with kustomize (kubectl apply -k config/default, then config/keys).
	$(KUBECTL) apply --server-side -k config/default
	$(KUBECTL) apply --server-side -k config/keys

.PHONY: undeploy
undeploy: ## Remove what `make deploy` installed (CRDs too: every Sandbox is deleted first).
	@# Sandboxes carry the manager's finalizer: delete them while the manager still runs, or the CRD hangs.
	$(KUBECTL) delete sandboxes.sandbox.airlock.dev --all --all-namespaces --ignore-not-found --timeout=2m || true
	$(KUBECTL) delete --ignore-not-found -k config/keys
	$(KUBECTL) delete --ignore-not-found -k config/default

##@ Release

# Architectures of the release's sandbox image: "amd64", or "amd64 arm64" where arm64 programs run under
# qemu-user (hack/binfmt.sh; about twice as long to build). Airlock's own images are always amd64 and arm64.
SANDBOX_ARCHS ?= amd64

.PHONY: release
release: $(HELM) ## Release artifacts into dist/: images as multi-arch OCI layouts, the chart, the SDKs' packages, CLI binaries, SHA256SUMS (docs/release.md).
	HELM=$(HELM) SANDBOX_ARCHS="$(SANDBOX_ARCHS)" hack/release.sh build

.PHONY: push
push: $(HELM) ## Push dist/'s images and a chart pinning them by digest to REGISTRY=host[:port]/path; digests into dist/digests.json.
	@test -n "$(REGISTRY)" || { echo "usage: make push REGISTRY=host[:port]/path (e.g. 127.0.0.1:5000/airlock)"; exit 1; }
	HELM=$(HELM) hack/release.sh push "$(REGISTRY)"

.PHONY: test-release
test-release: $(HELM) release ## make release, then make push into a real registry (CNCF distribution) on loopback and check what it serves (test/release).
	AIRLOCK_HELM=$(HELM) AIRLOCK_REGISTRY=$$(hack/build-registry.sh) go test $(GO_TEST_FLAGS) ./test/release/ -count=1 -v -timeout 20m

.PHONY: test-release-cluster
test-release-cluster: $(HELM) release ## On the running local cluster: `helm install oci://` of the chart pushed to a loopback registry, whose images containerd pulls (not imported).
	eval "$$(hack/local-cluster.sh env)" && AIRLOCK_E2E_HELM=$(HELM) AIRLOCK_E2E_KUBECTL=$(KUBECTL) AIRLOCK_REGISTRY=$$(hack/build-registry.sh) \
		go test -tags registry ./test/helm/ -run TestHelmInstallFromARegistry -count=1 -v -timeout 20m

$(HELM):
	@mkdir -p $(TOOLS_DIR)
	GOBIN=$(TOOLS_DIR) go install -ldflags "$(HELM_LDFLAGS)" helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)
	mv -f $(TOOLS_DIR)/helm $@
