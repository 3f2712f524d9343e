module github.com/chatrelay/chatrelay

go 1.26.0

require (
	github.com/fsnotify/fsnotify v1.10.1
	github.com/gofrs/flock v0.13.2
)

require golang.org/x/sys v0.49.0 // indirect
