// Word lists of RULER's generators (datasets/tasks/ruler.cpp). RULER draws
// them from the wonderwords package (nouns, adjectives, verbs); these are
// common English words of the same kinds, written here so that generation
// needs nothing outside the repository. Keys of the niah tasks are
// adjective-noun pairs ("lively-cat"), as in RULER; cwe draws from all three.
#include "datasets/tasks/ruler_internal.h"

namespace kvlab {
namespace ruler_internal {

const char kRulerAdjectives[] =
      "able absent abundant adorable adventurous afraid aggressive agreeable alert alive amazing amused "
      "ancient angry annoyed anxious appropriate aromatic arrogant ashamed attractive average awful bad "
      "beautiful better bewildered big billowy bitter black blue blushing boiling bold bored brave breezy "
      "brief bright brown bumpy busy calm careful cautious charming cheerful chilly chubby clean clever cloudy "
      "clumsy cold colorful colossal combative comfortable concerned confused cool cooperative courageous "
      "crazy creepy crooked crowded cruel cuddly curious curly cute damaged damp dangerous dark dazzling "
      "deafening deep defeated delicate delicious delightful depressed determined different difficult dirty "
      "disgusted distinct disturbed dizzy doubtful drab dry dull dusty eager early elated elegant embarrassed "
      "empty enchanting energetic enormous enthusiastic envious evil excited expensive exuberant faint fair "
      "faithful famous fancy fantastic fast fat fierce filthy fine flaky flat fluffy foolish fragile frail "
      "frantic fresh friendly frightened funny fuzzy gentle giant gifted glamorous gleaming glorious good "
      "gorgeous graceful great greedy green grieving grumpy handsome happy hard harsh healthy heavy helpful "
      "helpless hilarious hissing hollow homeless honest horrible hot huge hungry hurt icy ideal immense "
      "important impossible innocent inquisitive itchy jealous jittery jolly joyous juicy kind large late lazy "
      "light lively lonely long loose loud lovely lucky magnificent massive melodic messy mighty misty modern "
      "motionless muddy mushy mysterious narrow nasty naughty nervous new nice noisy nutty obedient obnoxious "
      "odd old orange ordinary outrageous panicky perfect plain pleasant poised polite poor powerful precious "
      "prickly proud puzzled quaint quick quiet rapid rare red relieved rich right robust rotten rough round "
      "royal rusty sad salty scary scrawny selfish shaggy shaky shallow sharp shiny short shy silent silky "
      "silly skinny sleepy slimy slow small smiling smooth soft solid sore sour sparkling spicy splendid "
      "spotless square squeaky steady steep sticky stormy strange strong stupid successful super sweet swift "
      "tall tame tasty tender tense terrible thankful thick thirsty thoughtful tiny tired tough troubled ugly "
      "uneven unusual upset uptight vast victorious vivacious wandering warm weak wealthy weary wet white "
      "wicked wide wild windy wise witty wonderful wooden worried wrong yellow young zany zealous ";

const char kRulerNouns[] =
      "account acorn actor airport alarm album anchor animal ankle answer apple apron arch arm army arrow "
      "artist attic aunt avenue baby badge bag bakery ball balloon banana band bank barn basket bath battery "
      "beach bead beam bean bear beard bed bee beetle bell belt bench berry bicycle bird birthday biscuit "
      "blade blanket boat body bone book boot bottle boundary bow bowl box boy brain branch bread brick bridge "
      "brother brush bubble bucket building bulb bus butter button cabbage cabin cake camera camp candle canoe "
      "canvas cap car card carpet carrot cart castle cat cave ceiling cellar chain chair chalk channel cheese "
      "cherry chess chicken child chimney church circle city clock cloud coach coast coat coffee coin collar "
      "comb comet compass cook copper corn cottage cotton country cousin cow crab crayon cream creature crow "
      "crown cup curtain cushion daisy dance daughter deer desert desk diamond dinner doctor dog doll dolphin "
      "door dragon drawer dream dress drum duck eagle ear earth egg elbow elephant engine eye face factory "
      "fairy family farm father feather fence field finger fire fish flag flame flower flute fog folder forest "
      "fork fountain fox frog fruit galaxy garage garden gate ghost giraffe glass glove goat gold grape grass "
      "guitar hammer hand harbor hat hawk heart helmet hill hook horse hospital house island jacket jar jelly "
      "jewel journey kettle key king kitchen kite kitten knee knife ladder lake lamp lantern leaf lemon letter "
      "library lighthouse lily lion lizard lock machine magnet map market meadow medal milk mirror monkey moon "
      "mountain mouse music nail needle nest net night notebook ocean office onion orchard oven owl paint "
      "palace pan paper parrot pasta path peach pear pebble pencil pepper piano pickle pig pillow pilot pin "
      "pipe pirate planet plate pocket poem pond potato prince puppet puzzle queen quilt rabbit radio rain "
      "rainbow river road robot rock rocket roof room rope rose sail salad sand scarf school scissors sea seed "
      "shadow sheep shell ship shirt shoe shop shovel silver singer sister skate sky snail snake snow soap "
      "sock sofa soup spider spoon square stairs star station stone storm street string sugar sun swan sweater "
      "table tail teacher temple tent thread tiger toast tomato tooth torch tower town toy tractor train tree "
      "truck trumpet tunnel turtle umbrella uncle valley vase village violin wagon wall wallet watch water "
      "wave whale wheel whistle window wing winter wizard wolf wood wool worm yacht yard zebra ";

const char kRulerVerbs[] =
      "accept add admire admit advise agree allow amuse announce answer appear applaud arrange arrive ask "
      "attach attack attend bake balance bang bathe battle beg behave belong bless blink boil bolt borrow "
      "bounce breathe bruise brush bump buzz calculate call camp care carry carve cause challenge change "
      "charge chase cheat check cheer chew choke chop claim clap clean clear climb close coach collect comb "
      "command compare complain complete concentrate confess consider contain continue copy correct cough "
      "count cover crack crash crawl cross crush cry cure curl cycle dance dare decide decorate delay delight "
      "deliver depend describe deserve destroy develop dig disagree discover divide doubt drag drain draw "
      "dream dress drip drop drum dry dust earn educate embarrass employ empty encourage end enjoy enter "
      "escape examine excite excuse exercise exist expand expect explain explode extend face fade fail fancy "
      "fasten fear fence fetch file fill film fix flap flash float flood flow flower fold follow force form "
      "found frame frighten fry gather gaze glow glue grab grate grease greet grin grip groan guard guess "
      "guide hammer hand handle hang happen harm hate haunt heal heap heat help hook hop hope hover hug hum "
      "hunt hurry identify ignore imagine impress improve include increase inform inject injure instruct "
      "intend interest invent invite itch jail jam jog join joke judge juggle jump kick kill kiss kneel knit "
      "knock knot label land last laugh launch learn level license lick lie lighten like list listen live load "
      "lock long look love manage march mark marry match mate matter measure melt memorize mend milk mine miss "
      "mix moan moor mourn move muddle mug multiply murder nail name need nest nod note notice number obey "
      "object observe obtain occur offend offer open order overflow owe own pack paddle paint park part pass "
      "paste pat pause peck pedal peel peep perform permit phone pick pinch pine place plan plant play please "
      "plug point poke polish pop possess post pour practise pray preach precede prefer prepare present "
      "preserve press pretend prevent prick print produce program promise protect provide pull pump punch "
      "puncture punish push question queue race radiate rain raise reach realise receive recognise record "
      "reduce reflect refuse regret reign reject rejoice relax release rely remain remember remind remove "
      "repair repeat replace reply report reproduce request rescue retire return rhyme rinse risk rob rock "
      "roll rot rub ruin rule rush sack sail satisfy save saw scare scatter scold scorch scrape scratch scream "
      "screw scribble scrub seal search separate serve settle shade share shave shelter shiver shock shop "
      "shrug sigh sign signal sin sip ski skip slap slip slow smash smell smile smoke snatch sneeze sniff "
      "snore snow soak soothe sound spare spark sparkle spell spill spoil spot spray sprout squash squeak "
      "squeal squeeze stain stamp stare start stay steer step stir stitch stop store strap strengthen stretch "
      "strip stroke stuff subtract succeed suck suffer suggest suit supply support suppose surprise surround "
      "suspect suspend switch talk tame tap taste tease telephone tempt terrify test thank thaw tick tickle "
      "tie time tip tire touch tour tow trace trade train transport trap travel treat tremble trick trip trot "
      "trouble trust try tug tumble turn twist type undress unfasten unite unlock unpack untidy use vanish "
      "visit wail wait walk wander want warm warn wash waste watch water wave weigh welcome whine whip whirl "
      "whisper whistle wink wipe wish wobble wonder work worry wrap wreck wrestle wriggle yawn yell zip zoom ";

}  // namespace ruler_internal
}  // namespace kvlab
