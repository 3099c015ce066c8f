# oncehook: see README.md. `make test` is what CI runs.
GO      ?= go
PREFIX  ?= /usr/local
DESTDIR ?=
BIN     := bin/oncehook
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X main.version=$(VERSION)

.PHONY: all build run test race vet lint fmt bench soak fuzz chaos chaos-seeds chaos-clean powercut install uninstall deb clean

all: build

build:
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) .

run: build
	./$(BIN) serve

vet:
	$(GO) vet ./...

# The chaos suite runs three nodes of its own and measures timing; it goes
# after the other packages so they do not compete for the CPU.
test: vet
	$(GO) test -race -count=1 -timeout 20m $$($(GO) list ./... | grep -v /systest/chaos)
	$(GO) test -race -count=1 -timeout 20m ./systest/chaos

lint: vet
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

fmt:
	gofmt -w $$(git ls-files '*.go')

bench: build
	$(GO) test -run '^$$' -bench . -benchmem -count 6 ./engine ./providers ./cluster | tee bench.txt
	$(GO) test -run '^$$' -bench Intake -benchtime 3s -count 1 ./intake | tee -a bench.txt
	$(GO) test -run '^$$' -bench Intake -benchtime 3s -count 1 . | tee -a bench.txt
	$(GO) run ./bench -spawn 1 -bin $(BIN) -c 64 -d 5s -size 1KiB -provider standard
	$(GO) run ./bench -spawn 3 -bin $(BIN) -c 64 -d 5s -size 1KiB -provider standard

# A soak (docs/reliability.md, "Soak"): three nodes of a failpoints build under
# a steady open-model RATE/s for DURATION, keys expiring all the time, a leader
# change every TRANSFER; fails on unbounded growth (RSS, fds, goroutines, data
# dir) or latency drift. Writes bench/results/soak-<date>-<commit>/.
DURATION ?= 10m
RATE     ?= 300
TRANSFER ?= 3m
soak:
	$(GO) build -tags failpoints -o bin/oncehook-failpoints .
	$(GO) run ./bench -soak -spawn 3 -bin bin/oncehook-failpoints -rate $(RATE) -c 256 -d $(DURATION) -soak-transfer $(TRANSFER)

# Every fault scenario of systest/chaos (systest/chaos/RELIABILITY.md) with
# SEEDS seeds each, as root (network namespaces, iptables, tmpfs). Writes
# systest/chaos/results/latest.md (and a porcupine HTML per failing run).
# `go test ./systest/chaos` (and so `make test`) runs the short profile (S0 S1 S4
# S5 S6, one seed) and the hostile-input, security and mutual-TLS suites;
# -short or ONCEHOOK_CHAOS=0 skips them.
SEEDS ?= 2
CHAOS_FLAGS ?=
chaos:
	mkdir -p systest/chaos/results
	ONCEHOOK_CHAOS=1 $(GO) test -count=1 -timeout 180m -run 'TestChaos' -v ./systest/chaos -args -full -seeds $(SEEDS) $(CHAOS_FLAGS) \
		> systest/chaos/results/chaos-run.log 2>&1; rc=$$?; \
		grep -E '^(--- |    (scenarios|bugs)_test|PASS|FAIL|ok)' systest/chaos/results/chaos-run.log; exit $$rc

# Every power-cut scenario of systest/powercut (docs/reliability.md, "Power
# cuts"): the leader, a follower, all three at once. As root, with /dev/fuse and
# the fuse3 package. `go test ./systest/powercut` (and so `make test`) runs the
# leader cut and the cut of all three; -short or ONCEHOOK_POWERCUT=0 skips them.
powercut:
	ONCEHOOK_POWERCUT=1 $(GO) test -count=1 -timeout 20m -run 'TestPowerCut' -v ./systest/powercut

# CHAOS_SEEDS seeds (1..N) of every scenario, overnight, as root: one `go test`
# per seed, so that a seed that fails or times out keeps the reports of the
# others. Writes systest/chaos/results/seeds-<time>/: summary.txt (one line a
# seed), seedN.log and seedN/latest.md. See docs/reliability.md.
CHAOS_SEEDS ?= 20
chaos-seeds:
	@dir=$(CURDIR)/systest/chaos/results/seeds-$$(date +%Y%m%d-%H%M%S); mkdir -p $$dir; \
	for s in $$(seq 1 $(CHAOS_SEEDS)); do \
		if ONCEHOOK_CHAOS=1 $(GO) test -count=1 -timeout 150m -run 'TestChaos' -v ./systest/chaos \
			-args -full -seed0 $$s -seeds 1 -results $$dir/seed$$s $(CHAOS_FLAGS) > $$dir/seed$$s.log 2>&1; \
		then echo "seed $$s: ok"; else echo "seed $$s: FAIL (see seed$$s.log, seed$$s/latest.md)"; fi | tee -a $$dir/summary.txt; \
	done; echo "results in $$dir"; ! grep -q FAIL $$dir/summary.txt

# What a killed test run left (a -timeout panic, a SIGKILL): the nodes and
# helpers the harness started, its network namespaces, mounts, loop devices,
# cgroups and run directories, only those of runs whose test process is gone
# (internal/testproc). Safe when nothing is left. As root, like `make chaos`.
chaos-clean:
	$(GO) run ./systest/chaos/cmd/chaosclean

FUZZTIME ?= 20s
# Every Fuzz target of every package, each for FUZZTIME; a short
# minimisation keeps slow targets (engine files, configs) fuzzing.
fuzz:
	for p in $$($(GO) list ./... | grep -v /systest); do \
		for f in $$($(GO) test $$p -list '^Fuzz' | grep '^Fuzz'); do \
			$(GO) test $$p -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 2s || exit 1; \
		done; \
	done

# The unit names $(PREFIX)/bin/oncehook: systemd/oncehook.service is written for
# PREFIX=/usr/local and its /usr/local/ paths follow PREFIX.
# install does not build: under sudo it would compile as root, with root's
# PATH (often without go). Build first as yourself.
install:
	@test -x $(BIN) || { echo "make install: no $(BIN): run make build first (as yourself, not root)" >&2; exit 1; }
	@if [ -n "$$(find . -name '*.go' -newer $(BIN) -not -path './bin/*' | head -n 1)" ]; then \
		echo "make install: $(BIN) is older than the sources: run make build first (as yourself, not root)" >&2; exit 1; fi
	install -Dm0755 $(BIN) $(DESTDIR)$(PREFIX)/bin/oncehook
	install -d $(DESTDIR)/etc/systemd/system
	sed -e 's#/usr/local/#$(PREFIX)/#g' systemd/oncehook.service > $(DESTDIR)/etc/systemd/system/oncehook.service
	chmod 0644 $(DESTDIR)/etc/systemd/system/oncehook.service
	install -Dm0644 systemd/oncehook.sysusers $(DESTDIR)/usr/lib/sysusers.d/oncehook.conf
	install -d -m0750 $(DESTDIR)/etc/oncehook
	# the service reads its config as group oncehook (a reinstall; a first one runs before the group exists)
	if [ -z "$(DESTDIR)" ] && getent group oncehook >/dev/null; then chgrp oncehook /etc/oncehook; fi
	install -Dm0640 config.example.toml $(DESTDIR)/etc/oncehook/oncehook.toml.example
	install -Dm0644 README.md $(DESTDIR)$(PREFIX)/share/doc/oncehook/README.md
	install -Dm0644 docs/alerts.yml $(DESTDIR)$(PREFIX)/share/doc/oncehook/alerts.yml
	install -Dm0644 docs/grafana-dashboard.json $(DESTDIR)$(PREFIX)/share/doc/oncehook/grafana-dashboard.json
	# README's links: docs/*.md and providers/SCHEMES.md beside it
	install -Dm0644 -t $(DESTDIR)$(PREFIX)/share/doc/oncehook/docs docs/*.md
	install -Dm0644 providers/SCHEMES.md $(DESTDIR)$(PREFIX)/share/doc/oncehook/providers/SCHEMES.md
	install -Dm0644 cluster/DESIGN.md $(DESTDIR)$(PREFIX)/share/doc/oncehook/cluster/DESIGN.md
	install -Dm0644 systest/chaos/RELIABILITY.md $(DESTDIR)$(PREFIX)/share/doc/oncehook/systest/chaos/RELIABILITY.md
	install -Dm0644 config.example.toml $(DESTDIR)$(PREFIX)/share/doc/oncehook/config.example.toml
	install -Dm0644 -t $(DESTDIR)$(PREFIX)/share/doc/oncehook/bench/results bench/results/20261205-230435-d1a256e-3n-sustain.png

uninstall:
	rm -f $(DESTDIR)$(PREFIX)/bin/oncehook $(DESTDIR)/etc/systemd/system/oncehook.service \
	      $(DESTDIR)/usr/lib/sysusers.d/oncehook.conf $(DESTDIR)/etc/oncehook/oncehook.toml.example \
	      $(DESTDIR)$(PREFIX)/share/doc/oncehook/README.md $(DESTDIR)$(PREFIX)/share/doc/oncehook/alerts.yml \
	      $(DESTDIR)$(PREFIX)/share/doc/oncehook/grafana-dashboard.json
	rm -rf $(DESTDIR)$(PREFIX)/share/doc/oncehook/docs $(DESTDIR)$(PREFIX)/share/doc/oncehook/providers \
	      $(DESTDIR)$(PREFIX)/share/doc/oncehook/cluster $(DESTDIR)$(PREFIX)/share/doc/oncehook/systest \
	      $(DESTDIR)$(PREFIX)/share/doc/oncehook/bench $(DESTDIR)$(PREFIX)/share/doc/oncehook/config.example.toml

# A .deb (bin/oncehook_<version>_<arch>.deb) with nfpm, run as a tool: it is
# not a module dependency. Static binary in /usr/bin, the unit in
# /usr/lib/systemd/system, the sysusers file, config.example.toml as the
# conffile /etc/oncehook/oncehook.toml. Not part of `make test`.
NFPM        ?= $(GO) run github.com/goreleaser/nfpm/v2/cmd/nfpm@v2.45.2
DEB_ARCH    ?= $(shell $(GO) env GOARCH)
# Debian versions start with a digit: v1.2.3 -> 1.2.3; a commit or dev -> 0.0.0~...; '-' -> '+'.
DEB_VERSION ?= $(shell echo '$(VERSION)' | sed -e 's/^v//' -e '/^[0-9][0-9]*\./!s/^/0.0.0~/' -e 'y/-/+/')

deb:
	mkdir -p bin/pkg
	CGO_ENABLED=0 GOARCH=$(DEB_ARCH) $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/pkg/oncehook .
	sed -e 's#/usr/local/#/usr/#g' systemd/oncehook.service > bin/pkg/oncehook.service
	DEB_ARCH=$(DEB_ARCH) DEB_VERSION='$(DEB_VERSION)' $(NFPM) pkg -p deb -f packaging/nfpm.yaml -t bin/

clean:
	rm -rf bin
