module causalflow.dev/nodeimages

go 1.26
