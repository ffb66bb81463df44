import ArgumentParser
import Foundation
import Haul

struct Status: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "status",
        abstract: "Show the batches in the state database, or the transfers of one batch.",
        discussion: "Exit codes: 0 shown; 1 the state database cannot be read; 64 bad usage or an unknown batch."
    )

    @Argument(help: "A batch to show transfer by transfer (without one: each batch, and its files not completed).")
    var batch: Int?

    @Flag(name: .long, help: "Print JSON instead of text.")
    var json = false

    @Flag(name: .long, help: "Forget the batches whose transfers have all finished (the files stay).")
    var prune = false

    @OptionGroup var state: StateOptions

    func validate() throws {
        if self.state.disabled {
            throw ValidationError("status needs the state database; --no-state makes no sense here.")
        }
        if self.prune && self.batch != nil {
            throw ValidationError("--prune applies to all batches; give no batch with it.")
        }
    }

    func run() throws {
        guard let store = try self.state.openStore() else { return }
        do {
            if self.prune {
                let forgotten = try store.forgetFinishedBatches()
                Get.printOutput(
                    self.json
                        ? #"{"forgotten":\#(forgotten)}"#
                        : "Forgot \(forgotten) finished batch\(forgotten == 1 ? "" : "es")."
                )
                return
            }
            if let batch = self.batch {
                let transfers = try store.transfers(inBatch: BatchID(batch))
                guard !transfers.isEmpty else {
                    Get.printError(
                        "haul: no batch \(batch) in \(self.state.resolvedPath?.path ?? "the state database")"
                    )
                    throw ExitCode(64)
                }
                for line in StatusRendering.transferLines(transfers, json: self.json) { Get.printOutput(line) }
            } else {
                let batches = try store.batches()
                // The text lists no completed transfer: a batch of nothing else needs no reading.
                let items = try batches.map { batch in
                    !self.json && batch.transferCounts["completed"] == batch.transferCount
                        ? [] : try store.transfers(inBatch: batch.id)
                }
                for line in StatusRendering.batchLines(batches, items: items, json: self.json) { Get.printOutput(line) }
            }
        } catch let exit as ExitCode {
            throw exit
        } catch {
            Get.printError("haul: cannot read the state database: \(error)")
            throw ExitCode(1)
        }
    }
}

/// Status output as pure functions of what the store holds.
enum StatusRendering {
    static let order = [
        "waiting", "running", "waitingToRetry", "paused", "completed", "skipped", "failed", "cancelled",
    ]

    /// How many of a batch's transfers that have not completed the text lists under it; `haul status ID` lists all.
    static let listedPerBatch = 10

    /// One line per batch: in JSON with every transfer (an `items` array); in text followed by the transfers that
    /// have not completed, at most ``listedPerBatch`` of them (a state database used day after day holds hundreds of
    /// thousands of completed files: listing them all took 5 s and 360,000 lines).
    static func batchLines(_ batches: [StoredBatch], items: [[StoredTransfer]], json: Bool) -> [String] {
        if json {
            return zip(batches, items).map { batch, transfers in
                var object = self.batchObject(batch)
                object["items"] = .array(transfers.map { .object(self.transferObject($0)) })
                return encode(object)
            }
        }
        guard !batches.isEmpty else { return ["No batches."] }
        return zip(batches, items).flatMap { batch, transfers in
            let open = transfers.filter { $0.state != "completed" }
            let listed = self.transferLines(Array(open.prefix(self.listedPerBatch)), json: false).map { "  " + $0 }
            let more =
                open.count > self.listedPerBatch
                ? ["  ... and \(open.count - self.listedPerBatch) more not completed: haul status \(batch.id)"] : []
            return [self.header(of: batch)] + listed + more
        }
    }

    /// A batch's line: its state, its transfers by state, its bytes on disk.
    static func header(of batch: StoredBatch) -> String {
        let states = self.order.compactMap { state in batch.transferCounts[state].map { "\($0) \(state)" } }
        return
            "batch \(batch.id)  \(batch.isFinished ? "finished  " : "unfinished")  \(Formatting.count(batch.transferCount, "file")): "
            + states.joined(separator: ", ") + "; \(Formatting.bytes(batch.bytesOnDisk)) on disk"
            + (batch.isListComplete ? "" : "; list not read to its end")
    }

    static func batchObject(_ batch: StoredBatch) -> [String: JSONValue] {
        [
            "batch": .int(batch.id.rawValue),
            "createdAt": .string(ISO8601DateFormatter().string(from: batch.createdAt)),
            "transfers": .int(batch.transferCount), "finished": .bool(batch.isFinished),
            "listComplete": .bool(batch.isListComplete),
            "bytesOnDisk": .int(Int(batch.bytesOnDisk)), "states": .object(batch.transferCounts.mapValues { .int($0) }),
        ]
    }

    static func transferObject(_ transfer: StoredTransfer) -> [String: JSONValue] {
        var object: [String: JSONValue] = [
            "id": .string(transfer.id.rawValue), "url": .string(transfer.url.absoluteString),
            "operation": .string(transfer.operation),
            "state": .string(transfer.state), "bytes": .int(Int(transfer.bytesOnDisk)),
            "attempts": .int(transfer.attempts),
        ]
        if let total = transfer.totalBytes { object["total"] = .int(Int(total)) }
        if let path = transfer.finalPath, transfer.state == "completed" { object["path"] = .string(path.path) }
        if let code = transfer.errorCode {
            var error: [String: JSONValue] = ["code": .string(code), "message": .string(transfer.errorMessage ?? "")]
            if let status = transfer.httpStatus { error["status"] = .int(status) }
            object["error"] = .object(error)
        }
        return object
    }

    static func transferLines(_ transfers: [StoredTransfer], json: Bool) -> [String] {
        transfers.map { transfer in
            if json { return encode(self.transferObject(transfer)) }
            let size =
                transfer.totalBytes.map { "\(Formatting.bytes(transfer.bytesOnDisk)) of \(Formatting.bytes($0))" }
                ?? Formatting.bytes(transfer.bytesOnDisk)
            var line =
                "\(transfer.state.padding(toLength: 14, withPad: " ", startingAt: 0)) \(transfer.operation.padding(toLength: 4, withPad: " ", startingAt: 0)) \(size)  \(transfer.url.absoluteString)"
            if let message = transfer.errorMessage, transfer.state == "failed" { line += "  (\(message))" }
            return line
        }
    }

    indirect enum JSONValue: Encodable {
        case string(String), int(Int), bool(Bool), object([String: JSONValue]), array([JSONValue])

        func encode(to encoder: any Encoder) throws {
            var container = encoder.singleValueContainer()
            switch self {
            case .string(let value): try container.encode(value)
            case .int(let value): try container.encode(value)
            case .bool(let value): try container.encode(value)
            case .object(let value): try container.encode(value)
            case .array(let value): try container.encode(value)
            }
        }
    }

    static func encode(_ object: [String: JSONValue]) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return String(decoding: (try? encoder.encode(object)) ?? Data("{}".utf8), as: UTF8.self)
    }
}
