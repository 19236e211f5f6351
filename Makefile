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
build: ## Build the manager and airlock-init binaries into bin/.
	CGO_ENABLED=0 go build -trimpath -o $(LOCALBIN)/manager ./cmd/manager
	CGO_ENABLED=0 go build -trimpath -o $(LOCALBIN)/airlock-init ./cmd/airlock-init

.PHONY: lint
lint: ## go vet, and golangci-lint when it builds here.
	go vet ./...
	@if [ -x "$(GOLANGCI_LINT)" ] || GOBIN=$(TOOLS_DIR) go install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION) 2>/dev/null && mv -f $(TOOLS_DIR)/golangci-lint $(GOLANGCI_LINT); then \
		$(GOLANGCI_LINT) run ./...; else echo "golangci-lint $(GOLANGCI_LINT_VERSION) did not build here; ran go vet only"; fi

##@ Test

.PHONY: test
test: verify test-unit test-integration ## Everything CI runs: verify, unit, integration (envtest).

.PHONY: test-unit
test-unit: ## Unit tests of the pure parts (no API server).
	go test $(GO_TEST_FLAGS) ./api/... ./internal/... ./cmd/... -skip 'Integration'

.PHONY: envtest-assets
envtest-assets: ## Build etcd, kube-apiserver and kubectl for envtest into the machine-wide cache (first time 15-20 min).
	hack/build-k8s.sh

.PHONY: test-integration
test-integration: envtest-assets ## Integration tests against a real kube-apiserver + etcd (envtest).
	KUBEBUILDER_ASSETS=$(K8S_BIN_DIR) go test $(GO_TEST_FLAGS) ./internal/controller/... ./internal/gateway/... -run 'Integration' -count=1 -v

.PHONY: test-e2e
test-e2e: ## End-to-end tests on the local cluster (brings it up and down; first time builds it, see README).
	hack/e2e.sh $(E2E_FLAGS)

.PHONY: bench-e2e
bench-e2e: ## Benchmark on the local cluster: Sandbox create->Ready vs a bare pod, gVisor and runc (docs/performance.md).
	hack/e2e.sh -run '^$$' -bench BenchmarkColdReady -benchtime 1x

.PHONY: bench-envtest
bench-envtest: envtest-assets ## Benchmark: 1,000 Sandboxes vs 1,000 pods+policies on envtest (docs/performance.md).
	KUBEBUILDER_ASSETS=$(K8S_BIN_DIR) go test ./internal/controller/... -run '^$$' -bench BenchmarkCreateSandboxes -benchtime 1x -count=1 -timeout 30m

##@ Tools

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
images: ## Build the pause and sandbox images and import them into the running local cluster.
	hack/images.sh all
