import ArgumentParser
import Foundation
import Haul

struct Resume: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "resume",
        abstract: "Continue every unfinished batch in the state database.",
        discussion: """
            Partial files continue with a validated Range request; files already complete are not fetched again. \
            Secret headers (Authorization, Cookie) are never stored: give them again with -H. The limits, retries and \
            timeout are those given now, as for get. \
            A batch whose process stopped before it had read its whole input list (-i) is resumed as far as it was \
            read, and reported: run the command that started it again for the rest. \
            Exit codes: 0 every item completed; 1 at least one failed, or a list was not read to its end; 64 bad \
            usage; 130 interrupted.
            """
    )

    // The options of `get`: a resumed batch runs as the command that started it would, with the limits, retries,
    // timeout and rate given now (they are not stored); -H adds headers to every request, such as the secret ones the
    // state database never keeps.
    @OptionGroup var options: TransferOptions

    @OptionGroup var state: StateOptions

    func validate() throws {
        if self.state.disabled {
            throw ValidationError("resume needs the state database; --no-state makes no sense here.")
        }
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
            if !self.options.json { Get.printOutput("Nothing to resume.") }
            return
        }
        let configuration = self.options.configuration(store: store)
        let mode = self.options.mode
        let started = ContinuousClock.now
        let (reports, interrupted, transferredBytes) = try await TransferManager.withTransferManager(
            configuration: configuration
        ) {
            manager in
            let interruption = SignalWatcher(signals: [SIGINT, SIGTERM]) { manager.stopAll() }
            defer { interruption.stop() }
            var reports: [BatchReport] = []
            var transferredBytes: Int64 = 0
            for stored in unfinished {
                // The events asked for before the first transfer starts: each is printed from its start.
                let selection = EventPrinter.selection(for: mode)
                let batch = try manager.resumeStoredBatch(
                    stored.id,
                    headers: self.options.parsedHeaders,
                    events: selection
                )
                transferredBytes += await EventPrinter.print(batch.events(selection), mode: mode)
                reports.append(await batch.report())
                if interruption.hasFired { break }
            }
            return (reports, interruption.hasFired, transferredBytes)
        }
        let merged = BatchReport(batchID: reports.first?.batchID ?? BatchID(0), items: reports.flatMap(\.items))
        Summary.print(
            merged,
            elapsed: .now - started,
            transferredBytes: transferredBytes,
            json: self.options.json,
            quiet: self.options.quiet
        )
        self.options.saveCookies(from: configuration)
        // A batch fed from a list whose process stopped before the list's end: only its recorded items were resumed.
        let partial = unfinished.filter { !$0.isListComplete }
        for batch in partial {
            Get.printError(
                "haul: batch \(batch.id) was stopped before its input list was read to the end; "
                    + "run the command that started it again to fetch the rest"
            )
        }
        if interrupted, !self.options.quiet, let line = Summary.interruptionLine(for: merged, keepsState: true) {
            Get.printError(line)
        }
        if interrupted { throw ExitCode(130) }
        if !merged.isSuccess || !partial.isEmpty { throw ExitCode(1) }
    }
}
