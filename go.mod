module github.com/laggard-dev/laggard

go 1.26.8
