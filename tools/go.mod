module switchyard.dev/tools

go 1.26.0

require (
	switchyard.dev/services/admin v0.0.0-00010101000000-000000000000
	switchyard.dev/services/prober v0.0.0-00010101000000-000000000000
	switchyard.dev/services/proxy v0.0.0-00010101000000-000000000000
	switchyard.dev/shared v0.0.0-00010101000000-000000000000
)

require github.com/valyala/tcplisten v1.0.0 // indirect

require (
	github.com/andybalholm/brotli v1.1.0 // indirect
	github.com/gofiber/fiber/v2 v2.52.15 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/mattn/go-colorable v0.1.13 // indirect
	github.com/mattn/go-isatty v0.0.24 // indirect
	github.com/mattn/go-runewidth v0.0.16 // indirect
	github.com/molecule-man/go-brrr v1.3.1 // indirect
	github.com/rivo/uniseg v0.2.0 // indirect
	github.com/valyala/bytebufferpool v1.0.0 // indirect
	github.com/valyala/fasthttp v1.51.0 // indirect
	go.uber.org/goleak v1.3.0
	go.yaml.in/yaml/v3 v3.0.3
	golang.org/x/sync v0.25.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
)

replace (
	switchyard.dev/services/admin => ../services/admin
	switchyard.dev/services/prober => ../services/prober
	switchyard.dev/services/proxy => ../services/proxy
	switchyard.dev/shared => ../shared
)
