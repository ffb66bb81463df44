import Foundation
import HaulTesting
import Testing

@Suite("haul put and haul rm, end to end", .timeLimit(.minutes(2)))
struct PutAndRemoveEndToEndTests {
    func withFolder<T>(_ body: (URL) async throws -> T) async throws -> T {
        let url = FileManager.default.temporaryDirectory.appending(path: "haul-cli-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: url) }
        return try await body(url)
    }

    @Test func putUploadsEachFileToTheBaseURLUnderItsNameAndExitsZero() async throws {
        try await FaultInjectingServer.withServer { server in
            try await self.withFolder { folder in
                let a = FaultInjectingServer.body(size: 300_000, seed: 1)
                try Data(a).write(to: folder.appending(path: "a.bin"))
                try Data([1, 2, 3]).write(to: folder.appending(path: "b c.txt"))
                let output = try await HaulProcess.run([
                    "put", folder.appending(path: "a.bin").path, folder.appending(path: "b c.txt").path, "--to",
                    server.url("/dav/").absoluteString, "-H", "X-Token: t1",
                ])
                #expect(output.status == 0, "\(output.stderr)")
                #expect(server.uploads["/dav/a.bin"]?.body == a)
                #expect(server.uploads["/dav/b%20c.txt"]?.body == [1, 2, 3])
                #expect(server.requests.allSatisfy { $0.method == "PUT" && $0.headers["x-token"] == "t1" })
                #expect(output.stdout.contains("2 files: 2 completed, 0 failed"))
            }
        }
    }

    @Test func putTakesABaseURLWrittenWithSpacesAsAPersonWritesIt() async throws {
        try await FaultInjectingServer.withServer { server in
            try await self.withFolder { folder in
                try Data([4, 2]).write(to: folder.appending(path: "n.bin"))
                let output = try await HaulProcess.run([
                    "put", folder.appending(path: "n.bin").path, "--to", "http://127.0.0.1:\(server.port)/my dav/",
                    "--no-state",
                ])
                #expect(output.status == 0, "\(output.stderr)")
                #expect(server.uploads["/my%20dav/n.bin"]?.body == [4, 2])
            }
        }
    }

    @Test func putWithPostSendsAMultipartFieldAndNamesEveryFailedFileInJSON() async throws {
        try await FaultInjectingServer.withServer { server in
            try await self.withFolder { folder in
                try Data([9, 9]).write(to: folder.appending(path: "ok.bin"))
                try Data([7]).write(to: folder.appending(path: "denied.bin"))
                server.setUploadFaults([.status(403)], at: "/form/denied.bin")
                let output = try await HaulProcess.run([
                    "put", folder.appending(path: "ok.bin").path, folder.appending(path: "denied.bin").path, "--to",
                    server.url("/form").absoluteString, "--method", "POST", "--field", "upload", "--json",
                ])
                #expect(output.status == 1)
                #expect(server.uploads["/form/ok.bin"]?.field == "upload")
                #expect(server.uploads["/form/ok.bin"]?.body == [9, 9])
                let events = try output.stdout.split(separator: "\n").map { line in
                    try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
                }
                let failed = try #require(events.first { $0["event"] as? String == "failed" })
                #expect(failed["url"] as? String == server.url("/form/denied.bin").absoluteString)
                #expect((failed["error"] as? [String: Any])?["status"] as? Int == 403)
                #expect(events.last?["event"] as? String == "finished")
                #expect(output.stderr.contains("FAILED \(server.url("/form/denied.bin").absoluteString)"))
            }
        }
    }

    @Test(arguments: [
        ["put", "--to", "http://127.0.0.1:9/x"],
        ["put", "MISSING", "--to", "http://127.0.0.1:9/x"],
        ["put", "FOLDER", "--to", "http://127.0.0.1:9/x"],
        ["put", "FILE", "--to", "ftp://127.0.0.1/x"],
        ["put", "FILE", "--to", "http://127.0.0.1:9/x", "--method", "PATCH"],
        ["put", "FILE", "--to", "http://127.0.0.1:9/x", "--field", "f"],
        ["put", "FILE", "FOLDER/FILE", "--to", "http://127.0.0.1:9/x"],
        ["rm"],
        ["rm", "ftp://127.0.0.1/x"],
        ["rm", "http://127.0.0.1:9/x", "-j", "0"],
    ])
    func badUsageExitsSixtyFourAndSendsNothing(_ arguments: [String]) async throws {
        try await self.withFolder { folder in
            try FileManager.default.createDirectory(
                at: folder.appending(path: "sub"),
                withIntermediateDirectories: true
            )
            try Data([1]).write(to: folder.appending(path: "FILE"))
            try Data([2]).write(to: folder.appending(path: "sub/FILE"))
            let resolved = arguments.map { argument in
                switch argument {
                case "MISSING": folder.appending(path: "missing").path
                case "FOLDER": folder.appending(path: "sub").path
                case "FILE": folder.appending(path: "FILE").path
                case "FOLDER/FILE": folder.appending(path: "sub/FILE").path
                default: argument
                }
            }
            let output = try await HaulProcess.run(resolved + ["--no-state"])
            #expect(output.status == 64, "\(resolved): \(output.stderr)")
            #expect(output.stdout.isEmpty)
        }
    }

    @Test func rmDeletesEveryURLFromArgumentsAndAnInputFileAndNamesTheMissingOnes() async throws {
        try await FaultInjectingServer.withServer { server in
            for index in 0..<4 { server.setUpload([UInt8(index)], at: "/f\(index)") }
            let list =
                "\(server.url("/f2").absoluteString)\n  header=X-Listed: yes\n\(server.url("/f3").absoluteString)\n"
            let missing = server.url("/gone").absoluteString
            let output = try await HaulProcess.run(
                ["rm", server.url("/f0").absoluteString, server.url("/f1").absoluteString, missing, "-i", "-"],
                stdin: list
            )
            #expect(output.status == 1)
            #expect(server.uploads.isEmpty)
            #expect(output.stdout.contains("5 files: 4 completed, 1 failed"))
            #expect(
                output.stdout.contains("FAILED \(missing): Not found: the server has no file at this URL [HTTP 404]")
            )
            #expect(server.requests.first { $0.path == "/f2" }?.headers["x-listed"] == "yes")

            let again = try await HaulProcess.run(["rm", missing, "--missing-ok"])
            #expect(again.status == 0, "\(again.stdout)")
        }
    }

    @Test func rmRefusesAnInputFileWithDownloadOptionsAndDeletesNothing() async throws {
        try await FaultInjectingServer.withServer { server in
            server.setUpload([1], at: "/keep")
            let list = "\(server.url("/keep").absoluteString)\n  out=x.bin\n"
            let output = try await HaulProcess.run(["rm", "-i", "-"], stdin: list)
            #expect(output.status == 64)
            #expect(output.stderr.contains("line 1: haul rm takes only header= options"))
            #expect(server.requests.isEmpty)
        }
    }

    @Test func aRerunOfPutWithTheSameStateSendsOnlyWhatWasNotUploaded() async throws {
        try await FaultInjectingServer.withServer { server in
            try await self.withFolder { folder in
                for name in ["x", "y", "z"] { try Data(name.utf8).write(to: folder.appending(path: name)) }
                server.setUploadFaults([.status(500), .status(500)], at: "/up/z")
                let arguments =
                    ["put"] + ["x", "y", "z"].map { folder.appending(path: $0).path } + [
                        "--to", server.url("/up").absoluteString, "--retries", "1",
                    ]
                let state = folder.appending(path: "state")
                let first = try await HaulProcess.run(arguments, stateHome: state)
                #expect(first.status == 1)
                #expect(server.requests.count == 4)
                let second = try await HaulProcess.run(arguments, stateHome: state)
                #expect(second.status == 0, "\(second.stdout)")
                #expect(server.requests.dropFirst(4).map(\.path) == ["/up/z"])
                let status = try await HaulProcess.run(["status", "--json"], stateHome: state)
                #expect(status.status == 0)
                let batches = try status.stdout.split(separator: "\n").map { line in
                    try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
                }
                let items = batches.flatMap { ($0["items"] as? [[String: Any]]) ?? [] }
                #expect(items.count == 6)
                #expect(items.allSatisfy { $0["operation"] as? String == "put" })
                #expect(batches.last?["finished"] as? Bool == true)
            }
        }
    }
}
