# oncehook: see README.md. `make test` is what CI runs.
GO      ?= go
PREFIX  ?= /usr/local
DESTDIR ?=
BIN     := bin/oncehook
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X main.version=$(VERSION)

.PHONY: all build run test race vet lint fmt bench fuzz install uninstall clean

all: build

build:
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) .

run: build
	./$(BIN) serve

vet:
	$(GO) vet ./...

test: vet
	$(GO) test -race -count=1 -timeout 20m ./...

lint: vet
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

fmt:
	gofmt -w $$(git ls-files '*.go')

bench: build
	$(GO) test -run '^$$' -bench . -benchmem -count 6 ./engine ./providers ./cluster | tee bench.txt
	$(GO) test -run '^$$' -bench Intake -benchtime 3s -count 1 . | tee -a bench.txt
	$(GO) run ./bench -spawn 1 -bin $(BIN) -c 64 -d 5s -size 1KiB -provider standard
	$(GO) run ./bench -spawn 3 -bin $(BIN) -c 64 -d 5s -size 1KiB -provider standard

FUZZTIME ?= 20s
fuzz:
	$(GO) test ./engine -run '^$$' -fuzz '^FuzzDecodeEntry$$' -fuzztime $(FUZZTIME)
	$(GO) test ./engine -run '^$$' -fuzz '^FuzzDecodeRecord$$' -fuzztime $(FUZZTIME)
	$(GO) test ./cluster -run '^$$' -fuzz '^FuzzDecodeResults$$' -fuzztime $(FUZZTIME)
	$(GO) test ./config -run '^$$' -fuzz '^FuzzSize$$' -fuzztime $(FUZZTIME)
	$(GO) test ./config -run '^$$' -fuzz '^FuzzDuration$$' -fuzztime $(FUZZTIME)
	for f in $$($(GO) test ./providers -list '^Fuzz' | grep '^Fuzz'); do \
		$(GO) test ./providers -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) || exit 1; done

install: build
	install -Dm0755 $(BIN) $(DESTDIR)$(PREFIX)/bin/oncehook
	install -Dm0644 systemd/oncehook.service $(DESTDIR)/etc/systemd/system/oncehook.service
	install -Dm0644 systemd/oncehook.sysusers $(DESTDIR)/usr/lib/sysusers.d/oncehook.conf
	install -Dm0640 config.example.toml $(DESTDIR)/etc/oncehook/oncehook.toml.example

uninstall:
	rm -f $(DESTDIR)$(PREFIX)/bin/oncehook $(DESTDIR)/etc/systemd/system/oncehook.service \
	      $(DESTDIR)/usr/lib/sysusers.d/oncehook.conf $(DESTDIR)/etc/oncehook/oncehook.toml.example

clean:
	rm -rf bin
