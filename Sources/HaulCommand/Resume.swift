import ArgumentParser
import Foundation
import Haul

struct Resume: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "resume",
        abstract: "Continue every unfinished batch in the state database.",
        discussion: """
            Partial files continue with a validated Range request; files already complete are not fetched again. \
            Secret headers (Authorization, Cookie) are never stored, so requests that needed them may now fail. \
            A batch whose process stopped before it had read its whole input list (-i) is resumed as far as it was \
            read, and reported: run the command that started it again for the rest. \
            Exit codes: 0 every item completed; 1 at least one failed, or a list was not read to its end; 64 bad \
            usage; 130 interrupted.
            """
    )

    @Option(name: [.customShort("j"), .long], help: "How many transfers run at once.")
    var maxConcurrent: Int = 4

    @Flag(name: .long, help: "Print one JSON event per line on standard output.")
    var json = false

    @Flag(name: [.customShort("q"), .long], help: "Print only failures.")
    var quiet = false

    @OptionGroup var state: StateOptions

    func validate() throws {
        guard (1...256).contains(self.maxConcurrent) else {
            throw ValidationError("--max-concurrent must be between 1 and 256.")
        }
        if self.state.disabled {
            throw ValidationError("resume needs the state database; --no-state makes no sense here.")
        }
        if self.json && self.quiet { throw ValidationError("--json and --quiet cannot be used together.") }
    }

    func run() async throws {
        guard let store = try self.state.openStore() else { return }
        let unfinished: [StoredBatch]
        do {
            unfinished = try store.unfinishedBatches()
        } catch {
            Get.printError("haul: cannot read the state database: \(error)")
            throw ExitCode(1)
        }
        guard !unfinished.isEmpty else {
            if !self.json { Get.printOutput("Nothing to resume.") }
            return
        }
        var configuration = TransferManager.Configuration()
        configuration.store = store
        configuration.maximumConcurrentTransfers = self.maxConcurrent
        let mode: EventRenderer.Mode = self.json ? .json : (self.quiet ? .quiet : .plain(progressEvery: .seconds(2)))
        let started = ContinuousClock.now
        let (reports, interrupted) = try await TransferManager.withTransferManager(configuration: configuration) {
            manager in
            let interruption = SignalWatcher(signals: [SIGINT, SIGTERM]) { manager.stopAll() }
            defer { interruption.stop() }
            var reports: [BatchReport] = []
            for stored in unfinished {
                let batch = try manager.resumeStoredBatch(stored.id)
                await EventPrinter.print(batch.events(mode.selection), mode: mode)
                reports.append(await batch.report())
                if interruption.hasFired { break }
            }
            return (reports, interruption.hasFired)
        }
        let merged = BatchReport(batchID: reports.first?.batchID ?? BatchID(0), items: reports.flatMap(\.items))
        Summary.print(merged, elapsed: .now - started, json: self.json, quiet: self.quiet)
        // A batch fed from a list whose process stopped before the list's end: only its recorded items were resumed.
        let partial = unfinished.filter { !$0.isListComplete }
        for batch in partial {
            Get.printError(
                "haul: batch \(batch.id) was stopped before its input list was read to the end; "
                    + "run the command that started it again to fetch the rest"
            )
        }
        if interrupted { throw ExitCode(130) }
        if !merged.isSuccess || !partial.isEmpty { throw ExitCode(1) }
    }
}
