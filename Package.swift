// swift-tools-version: 6.2
import PackageDescription

/// SwiftNIO's modules for a program that runs its own HTTP server or client on event loops (the test server, and the
/// HTTP floor benchmark).
let nioOnEventLoops: [Target.Dependency] = [
    .product(name: "NIOCore", package: "swift-nio"),
    .product(name: "NIOPosix", package: "swift-nio"),
    .product(name: "NIOHTTP1", package: "swift-nio"),
    .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
]

/// Release builds of Haul's own modules reach generic types' metadata through accessor functions, not by demangling
/// their names at run time: each generic requirement in such a name (`Dictionary<TransferID, Record>` needs
/// `TransferID: Hashable`) was answered, once per process, by the runtime's search of every conformance record in the
/// process (9,212 in the `haul` command). One small file's `haul get`: 76 → 62 different searches, 47.2 → 39.7 million
/// instructions, 0.94 of the time (20 rounds). Packages that use Haul accept the flag (tools version 6.2 and later);
/// building everything with it (`-Xswiftc -Xfrontend -Xswiftc` and the flag) removes 16 searches more, in the
/// dependencies (docs/benchmarks.md, twenty-second session).
let directMetadataAccess: [SwiftSetting] = [
    .unsafeFlags(
        ["-Xfrontend", "-disable-concrete-type-metadata-mangled-name-accessors"],
        .when(configuration: .release)
    )
]

/// Every target compiles in the Swift 6 language mode (the tools version's default) with warnings
/// treated as a defect by `.ci/run`, not by a flag here, so downstream builds never break on a new warning.
let package = Package(
    name: "Haul",
    platforms: [.macOS(.v14), .iOS(.v17), .tvOS(.v17), .watchOS(.v10)],
    products: [
        .library(name: "Haul", targets: ["Haul"]),
        .executable(name: "haul", targets: ["HaulCommand"]),
    ],
    dependencies: [
        .package(url: "https://github.com/swift-server/async-http-client", from: "1.37.0"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-crypto", "3.12.3"..<"5.0.0"),
        .package(url: "https://github.com/apple/swift-collections", from: "1.6.0"),
        .package(url: "https://github.com/groue/GRDB.swift", from: "7.10.0"),
        // AsyncHTTPClient's TLS, named for the https options (trusted certificates, verification) and the test server.
        .package(url: "https://github.com/apple/swift-nio-ssl", from: "2.37.6"),
        // AsyncHTTPClient's own dependency, named to turn its no-op request spans off.
        .package(url: "https://github.com/apple/swift-distributed-tracing", from: "1.7.3"),
        // Micro-benchmarks only (`swift package benchmark`); never linked into Haul or haul.
        .package(url: "https://github.com/ordo-one/benchmark", from: "1.38.1", traits: ["MallocInterposer"]),
    ],
    targets: [
        // Three C functions Swift cannot reach: an atomic no-replace rename (not in Swift's Glibc module), the
        // terminal's width (ioctl is variadic) and SQLite's setting that keeps the write-ahead log on close
        // (sqlite3_db_config is variadic; the header is libsqlite3-dev's on Linux, the SDK's on Apple platforms).
        .target(name: "CHaulSystem", linkerSettings: [.linkedLibrary("sqlite3")]),
        .target(
            name: "Haul",
            dependencies: [
                "CHaulSystem",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "DequeModule", package: "swift-collections"),
                .product(name: "HeapModule", package: "swift-collections"),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "GRDBSQLite", package: "GRDB.swift"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
            ],
            swiftSettings: directMetadataAccess
        ),
        .executableTarget(
            name: "HaulCommand",
            dependencies: [
                "Haul", "CHaulSystem",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            // On Linux the release command links Swift's runtime, Foundation and Dispatch statically: resolving
            // their symbols at each start cost about 6 ms of CPU per run, and calls into the runtime (retain,
            // release) skip the dynamic linker's indirection. Small corpus, `perf stat`, 10 interleaved runs:
            // 606 → 525 ms of CPU. The compiler flag makes the command's objects name the static libraries' own
            // dependencies (Foundation's ICU and CoreFoundation), which the link needs. Debug builds and the tests stay
            // dynamic; the flags sit on the command's target only, so packages that use the `Haul` library never see
            // them.
            //
            // `--no-export-dynamic` undoes the `-export-dynamic` that Swift's static linking adds: it exported the
            // 35,303 symbols of the package's own modules (the static libraries' are hidden), and at every start the
            // runtime's backtracer looks its own address up with `dladdr`, a linear scan of that table. Without them
            // (nothing in the process looks a symbol of the executable up by name; a crash's backtrace reads the
            // symbol table, which stays): `haul --version` 4.4 → 3.7 ms, one small file 10.6 → 9.7 ms (80 runs each).
            //
            // Linked by the toolchain's lld with packed relative relocations (`DT_RELR`, glibc 2.36 and later): the
            // executable's 123,651 relative relocations took a 3 MB table that the loader read at every start, now
            // 24 KB. One small file's `haul get` 0.922 of its time with gold's link (60 interleaved rounds; lld alone
            // 0.941), 2,000 small files 0.978 (16 rounds).
            swiftSettings: [.unsafeFlags(["-static-stdlib"], .when(platforms: [.linux], configuration: .release))]
                + directMetadataAccess,
            linkerSettings: [
                .unsafeFlags(
                    [
                        "-static-stdlib", "-use-ld=lld", "-Xlinker", "--no-export-dynamic",
                        "-Xlinker", "-z", "-Xlinker", "pack-relative-relocs",
                    ],
                    .when(platforms: [.linux], configuration: .release)
                )
            ]
        ),
        .target(
            name: "HaulTesting",
            dependencies: nioOnEventLoops + [.product(name: "NIOSSL", package: "swift-nio-ssl")]
        ),
        // Micro-benchmarks of the hot paths: `swift package benchmark` (see docs/benchmarks.md). An executable, so
        // `swift test` never runs it; it sees Haul's `package` declarations.
        .executableTarget(
            name: "HaulBenchmarks",
            dependencies: [
                "Haul",
                .product(name: "Benchmark", package: "benchmark"),
                .product(name: "NIOCore", package: "swift-nio"),
            ],
            path: "Benchmarks/HaulBenchmarks",
            plugins: [.plugin(name: "BenchmarkPlugin", package: "benchmark")]
        ),
        // The floor under `haul get`: AsyncHTTPClient alone on a list of URLs, as Haul configures it, with and without
        // writing the files (see Benchmarks/Tools/HTTPFloor/main.swift and docs/benchmarks.md). Not part of `swift test`;
        // not directly under Benchmarks/, where the benchmark plugin runs every executable as a benchmark suite.
        .executableTarget(
            name: "haul-http-floor",
            dependencies: [.product(name: "AsyncHTTPClient", package: "async-http-client")] + nioOnEventLoops,
            path: "Benchmarks/Tools/HTTPFloor"
        ),
        .testTarget(
            name: "HaulTests",
            dependencies: [
                "Haul", "HaulTesting", .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "GRDB", package: "GRDB.swift"),
            ]
        ),
        .testTarget(
            name: "HaulIntegrationTests",
            dependencies: [
                "Haul", "HaulTesting", .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            ]
        ),
        .testTarget(
            name: "HaulCommandTests",
            dependencies: [
                "Haul", "HaulCommand", "HaulTesting",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
    ]
)
